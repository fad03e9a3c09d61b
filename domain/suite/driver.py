"""Drives one case against a model, turn by turn, to its result. `ask` sends a SuiteRequest
to the model and returns its SuiteAnswer (the runner maps both to the adapter's types)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from domain.suite.cases import Case
from domain.suite.reasons import Verdict, Why
from domain.suite.suite import CaseResult
from domain.suite.types import SuiteAnswer, SuiteRequest


def judge_step(case: Case, history: SuiteRequest, answer: SuiteAnswer) -> SuiteRequest | Verdict:
    """`case.step`, except that a defect of the case's own check becomes a failed verdict
    rather than an exception an activity would retry forever."""
    try:
        return case.step(history, answer)
    except Exception:
        return Verdict(passed=False, reason=Why.JUDGE_ERROR.value)


def _over(case: Case) -> Verdict:
    return Verdict(passed=False, reason=Why.TURN_LIMIT.value.format(case.max_turns))


def run_case(case: Case, ask: Callable[[SuiteRequest], SuiteAnswer]) -> CaseResult:
    request = case.start()
    for _ in range(case.max_turns):
        step = judge_step(case, request, ask(request))
        if isinstance(step, Verdict):
            return CaseResult.of(case, step)
        request = step
    return CaseResult.of(case, _over(case))


async def run_case_async(
    case: Case, ask: Callable[[SuiteRequest], Awaitable[SuiteAnswer]]
) -> CaseResult:
    request = case.start()
    for _ in range(case.max_turns):
        step = judge_step(case, request, await ask(request))
        if isinstance(step, Verdict):
            return CaseResult.of(case, step)
        request = step
    return CaseResult.of(case, _over(case))
