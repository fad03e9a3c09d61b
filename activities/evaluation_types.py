"""What crosses the EvaluateDeployment workflow's boundary: ids, verdicts and reasons only."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from domain.invocation import Target
from domain.suite import CaseResult
from domain.suite.checks import CheckResult

# A fixed check in place of the suite, for a deployment none of its capabilities applies to:
# a reranker's (domain.suite.rerank) or an embedding model's (domain.suite.embedding).
Check = Literal["rerank", "embedding"]
# Sent by a case to its evaluation's workflow when the model refused the suite's temperature
# and answered without it: the cases scheduled after it are sent without it.
TEMPERATURE_REFUSED = "temperature_refused"


class EvaluationInput(BaseModel):
    evaluation_id: str
    tenant_id: str
    deployment_id: str
    concurrency: int = 4


class Prepared(BaseModel):
    target: Target
    context_tokens: int
    suite_version: str
    case_ids: list[str]
    capability_of: dict[str, str]
    # A check's name: its cases instead of the suite's.
    kind: Literal["suite"] | Check = "suite"


class CaseInput(BaseModel):
    tenant_id: str
    target: Target
    context_tokens: int
    case_id: str
    # The suite the evaluation was prepared with: a worker running another (a deploy between
    # the cases) refuses the case rather than mix two suites' cases under one version. None in
    # a history from before.
    suite_version: str | None = None
    # False: the model refused the suite's temperature earlier in the evaluation; send none.
    temperature: bool = True


class RecordInput(BaseModel):
    evaluation_id: str
    tenant_id: str
    deployment_id: str
    context_tokens: int
    results: list[CaseResult]
    suite_version: str | None = None  # as CaseInput's
    # Some cases were sent without temperature, the model having refused it.
    temperature_refused: bool = False


# The fixed checks' steps keep the rerank check's names, which the worker registers and the
# histories under way name; `check` says which check (none: the rerank check, as before).
class RerankInput(BaseModel):
    tenant_id: str
    target: Target
    check: Check = "rerank"


class RerankRecordInput(BaseModel):
    evaluation_id: str
    tenant_id: str
    deployment_id: str
    results: list[CheckResult]
    check: Check = "rerank"


class FailInput(BaseModel):
    evaluation_id: str
    tenant_id: str
    reason: str


class Progress(BaseModel):
    total: int
    done: int
    by_capability: dict[str, list[int]]  # capability → [done, total]
    status: str
