"""What crosses the EvaluateDeployment workflow's boundary: ids, verdicts and reasons only."""

from __future__ import annotations

from pydantic import BaseModel

from domain.invocation import Target
from domain.suite import CaseResult


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


class CaseInput(BaseModel):
    tenant_id: str
    target: Target
    context_tokens: int
    case_id: str


class RecordInput(BaseModel):
    evaluation_id: str
    tenant_id: str
    deployment_id: str
    context_tokens: int
    results: list[CaseResult]


class FailInput(BaseModel):
    evaluation_id: str
    tenant_id: str
    reason: str


class Progress(BaseModel):
    total: int
    done: int
    by_capability: dict[str, list[int]]  # capability → [done, total]
    status: str
