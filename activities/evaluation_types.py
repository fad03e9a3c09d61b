"""What crosses the EvaluateDeployment workflow's boundary: ids, verdicts and reasons only."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from domain.invocation import Target
from domain.suite import CaseResult
from domain.suite.rerank import RerankCaseResult


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
    # "rerank": a reranker, checked with domain.suite.rerank's cases instead of the suite's.
    kind: Literal["suite", "rerank"] = "suite"


class CaseInput(BaseModel):
    tenant_id: str
    target: Target
    context_tokens: int
    case_id: str
    # The suite the evaluation was prepared with: a worker running another (a deploy between
    # the cases) refuses the case rather than mix two suites' cases under one version. None in
    # a history from before.
    suite_version: str | None = None


class RecordInput(BaseModel):
    evaluation_id: str
    tenant_id: str
    deployment_id: str
    context_tokens: int
    results: list[CaseResult]
    suite_version: str | None = None  # as CaseInput's


class RerankInput(BaseModel):
    tenant_id: str
    target: Target


class RerankRecordInput(BaseModel):
    evaluation_id: str
    tenant_id: str
    deployment_id: str
    results: list[RerankCaseResult]


class FailInput(BaseModel):
    evaluation_id: str
    tenant_id: str
    reason: str


class Progress(BaseModel):
    total: int
    done: int
    by_capability: dict[str, list[int]]  # capability → [done, total]
    status: str
