"""The versioned capability suite: its cases, per-capability thresholds, and scoring.

A result holds only a case id, its capability, pass/fail and a templated reason (see
`reasons.py`), so results may be stored; prompts and outputs never leave the suite as data.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, ValidationInfo, model_validator

from domain.enums import Capability
from domain.stored import reading_stored
from domain.suite.cases import Case, all_cases
from domain.suite.cases.context import MIN_CONTEXT_TOKENS
from domain.suite.reasons import Verdict, Vocabulary, Why, fail, is_rendered_reason, render

# Bump whenever a case, a check or a threshold default changes: scores from different
# versions are different evidence.
SUITE_VERSION = "2026.12.1"
DEFAULT_THRESHOLD = 0.8
# Long-context requests are the suite's cost: its context size is the profile's
# maxContextTokens, but never more than this unless the operator raises it.
DEFAULT_CONTEXT_TOKEN_CAP = 16_000


class CaseResult(BaseModel):
    """One case's outcome, fit for storage: no prompt, no output."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    case_id: str
    capability: Capability
    passed: bool
    reason: str

    # An edge rule (`domain/stored.py`): a result is an activity's, recorded in the evaluation's
    # history, and the templates change with the suite (`Why`); a reason rendered from an older
    # one must still replay. Every result the suite makes (`of`) is checked.
    @model_validator(mode="after")
    def _reason_is_a_template(self, info: ValidationInfo) -> CaseResult:
        if not reading_stored(info) and not is_rendered_reason(self.reason):
            raise ValueError("a result reason must be a rendered template")
        return self

    @classmethod
    def of(cls, case: Case, verdict: Verdict) -> CaseResult:
        return cls(
            case_id=case.case_id,
            capability=case.capability,
            passed=verdict.passed,
            reason=verdict.reason,
        )


class CapabilityScore(NamedTuple):
    pass_rate: float
    verdict: Literal["pass", "fail"]


class Suite:
    suite_version = SUITE_VERSION

    def __init__(
        self,
        *,
        max_context_tokens: int | None = None,
        context_token_cap: int = DEFAULT_CONTEXT_TOKEN_CAP,
        thresholds: Mapping[Capability, float] | None = None,
        default_threshold: float = DEFAULT_THRESHOLD,
    ) -> None:
        if context_token_cap < MIN_CONTEXT_TOKENS:
            raise ValueError(f"context_token_cap must be at least {MIN_CONTEXT_TOKENS}")
        if max_context_tokens is not None and max_context_tokens < MIN_CONTEXT_TOKENS:
            raise ValueError(f"max_context_tokens must be at least {MIN_CONTEXT_TOKENS}")
        for value in (default_threshold, *(thresholds or {}).values()):
            if not 0.0 <= value <= 1.0:
                raise ValueError("thresholds are pass rates between 0 and 1")
        self.context_tokens = min(max_context_tokens or context_token_cap, context_token_cap)
        self._thresholds = {c: default_threshold for c in Capability}
        self._thresholds.update({Capability(c): v for c, v in (thresholds or {}).items()})
        self.cases: tuple[Case, ...] = tuple(all_cases(self.context_tokens))
        self._by_id: dict[str, Case] = {}
        for case in self.cases:
            if case.case_id in self._by_id:
                raise ValueError(f"duplicate case id {case.case_id}")
            if not case.case_id.startswith(f"{case.capability.value}/"):
                raise ValueError(f"case id {case.case_id} does not name its capability")
            self._by_id[case.case_id] = case

    def case(self, case_id: str) -> Case:
        return self._by_id[case_id]

    def cases_for(self, capability: Capability) -> tuple[Case, ...]:
        return tuple(c for c in self.cases if c.capability == capability)

    def threshold(self, capability: Capability) -> float:
        return self._thresholds[capability]

    @property
    def thresholds(self) -> dict[Capability, float]:
        return dict(self._thresholds)

    def result(self, case: Case, verdict: Verdict) -> CaseResult:
        return CaseResult.of(case, verdict)

    def unanswered(self, case: Case) -> CaseResult:
        """The result of a case the provider never answered (errors, timeouts)."""
        return self.result(case, Verdict(passed=False, reason=Why.NO_ANSWER.value))

    def refused(self, case: Case, feature: str) -> CaseResult:
        """The result of a case whose request the provider refused for an optional feature it
        tests (`SuiteRequest.optional_features`): the model does not offer it."""
        return self.result(case, render(fail(Why.FEATURE_REFUSED, feature), Vocabulary([feature])))

    def score(self, results: Iterable[CaseResult]) -> dict[Capability, CapabilityScore]:
        """Pass rate per capability over *all* its cases: a case without a result counts as
        failed, so a partial run cannot look better than a complete one."""
        seen: dict[str, CaseResult] = {}
        for result in results:
            case = self._by_id.get(result.case_id)
            if case is None:
                raise ValueError(f"{result.case_id} is not a case of suite {self.suite_version}")
            if case.capability != result.capability:
                raise ValueError(f"{result.case_id} belongs to {case.capability.value}")
            if result.case_id in seen:
                raise ValueError(f"two results for {result.case_id}")
            seen[result.case_id] = result
        scores: dict[Capability, CapabilityScore] = {}
        for capability in Capability:
            cases = self.cases_for(capability)
            passed = sum(1 for c in cases if c.case_id in seen and seen[c.case_id].passed)
            rate = passed / len(cases)
            # The tolerance keeps 4/5 against 0.8 a pass whatever the float rounding.
            verdict: Literal["pass", "fail"] = (
                "pass" if rate + 1e-9 >= self._thresholds[capability] else "fail"
            )
            scores[capability] = CapabilityScore(round(rate, 4), verdict)
        return scores
