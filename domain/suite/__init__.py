"""The capability evaluation suite (pure): cases with deterministic verifiers for the 13
capabilities, scoring against per-capability thresholds, and an oracle of reference answers.

    suite = Suite(max_context_tokens=profile.max_context_tokens)
    for case in suite.cases:
        result = await run_case_async(case, ask)        # ask: SuiteRequest -> SuiteAnswer
    scores = suite.score(results)                       # {Capability: (pass_rate, verdict)}

Imports only the standard library, pydantic, jsonschema and other `domain` modules.
"""

from domain.suite.cases import Case
from domain.suite.driver import judge_step, run_case, run_case_async
from domain.suite.oracle import Oracle, UnknownRequest, fingerprint
from domain.suite.reasons import Verdict, Why
from domain.suite.suite import (
    DEFAULT_CONTEXT_TOKEN_CAP,
    DEFAULT_THRESHOLD,
    SUITE_VERSION,
    CapabilityScore,
    CaseResult,
    Suite,
)
from domain.suite.types import (
    SuiteAnswer,
    SuiteMessage,
    SuiteRequest,
    SuiteResponseFormat,
    SuiteTool,
    SuiteToolCall,
    SuiteToolChoice,
)

__all__ = [
    "DEFAULT_CONTEXT_TOKEN_CAP",
    "DEFAULT_THRESHOLD",
    "SUITE_VERSION",
    "CapabilityScore",
    "Case",
    "CaseResult",
    "Oracle",
    "Suite",
    "SuiteAnswer",
    "SuiteMessage",
    "SuiteRequest",
    "SuiteResponseFormat",
    "SuiteTool",
    "SuiteToolCall",
    "SuiteToolChoice",
    "UnknownRequest",
    "Verdict",
    "Why",
    "fingerprint",
    "judge_step",
    "run_case",
    "run_case_async",
]
