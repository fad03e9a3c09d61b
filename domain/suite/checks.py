"""What the fixed checks report, case by case: the evidence a deployment no capability of the
suite applies to needs before it can be approved (a reranker: `rerank.py`; an embedding model:
`embedding.py`). A result names its case and says why in the check's own words, never a
model's output."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pydantic import BaseModel, ConfigDict


class CheckResult(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    case_id: str
    passed: bool
    reason: str


def all_passed(results: Sequence[CheckResult], case_ids: Iterable[str]) -> bool:
    """Every case answered and passed (a case without a result counts as failed)."""
    passed = {r.case_id for r in results if r.passed}
    return all(case_id in passed for case_id in case_ids)
