"""The fixed checks' cases through a deployment's adapter, for a deployment no capability of the
suite applies to: a reranker (`domain.suite.rerank`) and an embedding model
(`domain.suite.embedding`). A handful of small requests each, sent one after the other; a
provider's failure of one means what it means for a suite case (`raise_unless_unanswered`),
and a case it leaves unanswered is failed."""

from __future__ import annotations

from activities.evaluation_refusals import raise_unless_unanswered
from domain.suite.checks import CheckResult
from domain.suite.embedding import EMBEDDING_CASES, Vectors, verify_embeddings
from domain.suite.rerank import RERANK_CASES, verify_rerank
from providers.base import ProviderAdapter
from providers.errors import ProviderError


async def rerank_check(adapter: ProviderAdapter) -> list[CheckResult]:
    results = []
    for case in RERANK_CASES:
        try:
            answer = await adapter.rerank(case.query, case.documents, top_n=case.top_n)
        except ProviderError as exc:
            raise_unless_unanswered(exc, case.case_id)
            results.append(CheckResult(case_id=case.case_id, passed=False, reason="no answer"))
            continue
        ranked = [(item.index, item.relevance_score) for item in answer.results]
        results.append(verify_rerank(case, ranked))
    return results


async def embedding_check(adapter: ProviderAdapter) -> list[CheckResult]:
    """Each case's texts embedded at the model's own width (no `dimensions` asked for: the
    width a caller gets who asks for none)."""
    answers: list[Vectors | None] = []
    for case in EMBEDDING_CASES:
        try:
            answer = await adapter.embed(case.inputs)
        except ProviderError as exc:
            raise_unless_unanswered(exc, case.case_id)
            answers.append(None)
            continue
        answers.append(answer.vectors)
    return verify_embeddings(answers)
