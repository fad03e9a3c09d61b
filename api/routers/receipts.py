"""Receipts of a run: which deployment answered, the usage and how certain it is."""

from __future__ import annotations

import uuid
from datetime import datetime
from decimal import Decimal
from typing import Annotated

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field

from api.deps import SessionDep, require
from core.security import Principal
from domain.access import Action
from domain.enums import InvocationOutcome, Scope, UsageStatus
from store.repositories import InvocationReceiptRepository

router = APIRouter(tags=["receipts"])

RunReader = Annotated[Principal, Depends(require(Scope.RUNS_READ, Action.READ_RUNS))]


class Receipt(BaseModel):
    model_config = ConfigDict(populate_by_name=True, from_attributes=True)

    invocation_id: uuid.UUID = Field(alias="invocationId")
    tenant_id: str = Field(alias="tenantId")
    project_id: str = Field(alias="projectId")
    run_id: uuid.UUID | None = Field(alias="runId")
    attempt_id: uuid.UUID | None = Field(alias="attemptId")
    profile_id: str = Field(alias="profileId")
    deployment_id: str = Field(alias="deploymentId")
    route_plan_id: uuid.UUID | None = Field(alias="routePlanId")
    fallback_used: bool = Field(alias="fallbackUsed")
    request_hash: str = Field(alias="requestHash")
    idempotency_key: str = Field(alias="idempotencyKey")
    policy_decision_id: uuid.UUID = Field(alias="policyDecisionId")
    outcome: InvocationOutcome
    usage_status: UsageStatus = Field(alias="usageStatus")
    input_tokens: int | None = Field(alias="inputTokens")
    output_tokens: int | None = Field(alias="outputTokens")
    cached_input_tokens: int | None = Field(alias="cachedInputTokens")
    estimated_cost_usd: Decimal | None = Field(alias="estimatedCostUsd")
    pricing_revision: str = Field(alias="pricingRevision")
    latency_ms: int | None = Field(alias="latencyMs")
    time_to_first_token_ms: int | None = Field(alias="timeToFirstTokenMs")
    output_artifact_ref: str | None = Field(alias="outputArtifactRef")
    provider_request_id: str | None = Field(alias="providerRequestId")
    started_at: datetime = Field(alias="startedAt")
    ended_at: datetime | None = Field(alias="endedAt")


@router.get(
    "/factory/runs/{runId}/model-receipts",
    response_model=list[Receipt],
    operation_id="ListRunReceipts",
)
async def run_receipts(
    runId: uuid.UUID, principal: RunReader, session: SessionDep
) -> list[Receipt]:
    rows = await InvocationReceiptRepository(session, principal.tenant_id).list_for_run(runId)
    return [Receipt.model_validate(r) for r in rows]
