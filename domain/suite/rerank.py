"""The rerank check: the evidence a reranker needs before it can be approved.

None of the 13 capabilities applies to a reranker (they are properties of chat answers), so a
deployment served by the rerank adapter — a rerank provider, or any deployment listed only by
Rerank profiles — is evaluated with these cases instead of the suite's. Each is a query with
one document that is plainly the most relevant; the verifier is deterministic: the ranking
names every document index at most once, holds `top_n` results (all documents without it),
orders scores from high to low and ranks the relevant document first. The evidence is recorded
(Candidate → Evaluated, with no capability scores) only when every case passes; otherwise the
evaluation fails naming the cases and the deployment stays as it was. A Rerank profile that
lists a reranker should therefore require no capabilities: approval checks them as for any
profile, and a reranker has none measured.

The case texts are the check's own fixed texts, never a caller's content; results hold ids
and reasons only.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from pydantic import BaseModel, ConfigDict, Field

from domain.suite.checks import CheckResult, all_passed

RERANK_CAPABILITY = "rerank"  # the progress label of these cases (not a scored capability)


class RerankCase(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    case_id: str
    query: str
    documents: tuple[str, ...]
    relevant: int = Field(ge=0)
    top_n: int | None = None


# The name the rerank check's results had before the embedding check shared their shape.
RerankCaseResult = CheckResult


RERANK_CASES: tuple[RerankCase, ...] = (
    RerankCase(
        case_id="rerank-relevant-first",
        query="capital city of France",
        documents=(
            "Berlin is the capital city of Germany",
            "Paris is the capital city of France",
            "Bananas are a yellow fruit",
        ),
        relevant=1,
    ),
    RerankCase(
        case_id="rerank-top-n",
        query="how to boil an egg",
        documents=(
            "Boil the egg for nine minutes in water",
            "Stock markets fell on Monday",
            "The egg is a symbol of spring",
            "Water boils at 100 degrees",
        ),
        relevant=0,
        top_n=2,
    ),
    RerankCase(
        case_id="rerank-all-documents",
        query="python list sort",
        documents=(
            "Sort a Python list with sorted()",
            "Snakes of South America",
            "Lists in Python keep their order",
            "Sorting algorithms compared",
        ),
        relevant=0,
    ),
)
_BY_ID = {c.case_id: c for c in RERANK_CASES}


def rerank_case(case_id: str) -> RerankCase:
    return _BY_ID[case_id]


def verify_rerank(case: RerankCase, ranked: Sequence[tuple[int, float]]) -> RerankCaseResult:
    """`ranked`: (document index, relevance score) in the order the reranker returned them."""

    def result(passed: bool, reason: str) -> RerankCaseResult:
        return RerankCaseResult(case_id=case.case_id, passed=passed, reason=reason)

    indices = [i for i, _ in ranked]
    if any(i < 0 or i >= len(case.documents) for i in indices) or len(set(indices)) != len(indices):
        return result(False, "the ranking names an index twice or out of range")
    wanted = min(case.top_n or len(case.documents), len(case.documents))
    if len(indices) != wanted:
        return result(False, f"{len(indices)} results where {wanted} were asked for")
    scores = [s for _, s in ranked]
    if any(a < b for a, b in pairwise(scores)):
        return result(False, "scores are not in descending order")
    if indices[0] != case.relevant:
        return result(False, "the most relevant document is not ranked first")
    return result(True, "ranked as expected")


def rerank_passed(results: Sequence[RerankCaseResult]) -> bool:
    """Every case answered and passed (a case without a result counts as failed)."""
    return all_passed(results, (c.case_id for c in RERANK_CASES))
