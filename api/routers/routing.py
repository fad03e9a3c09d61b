"""Routing: tenant policy, scoring weights, the route-plan preview and ResolveRoutePlan."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sqlalchemy.exc import IntegrityError

from api.deps import RuntimeDep, SessionDep, require
from api.problems import Problem, invalid_body
from api.refusals import problem_of
from api.runtime import Runtime
from api.surface import ClassificationHeader, classification_of
from core.security import Principal
from domain.access import Action
from domain.enums import Scope
from domain.planner import PlanRequest
from domain.policy import DataClassification, TenantPolicy
from domain.route_plan import RoutePlanResult
from domain.scoring import Weights
from routing.refusals import Refusal
from store import routing_settings
from store.catalog_loader import load_policy, load_weights
from store.db import transaction

router = APIRouter(tags=["routing"])

Reader = Annotated[Principal, Depends(require(Scope.MODELS_READ, Action.READ_CATALOG))]
Admin = Annotated[Principal, Depends(require(Scope.MODELS_ADMIN, Action.MANAGE_DEPLOYMENTS))]
Invoker = Annotated[Principal, Depends(require(Scope.MODELS_INVOKE, Action.INVOKE))]


class Needs(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    # None: not given (on /gateway/route-plans the header's then, else Internal).
    data_classification: DataClassification | None = Field(default=None, alias="dataClassification")
    needs_tools: bool = Field(default=False, alias="needsTools")
    needs_structured_output: bool = Field(default=False, alias="needsStructuredOutput")
    context_tokens: int | None = Field(default=None, alias="contextTokens", gt=0, le=100_000_000)
    budget_applies: bool = Field(default=False, alias="budgetApplies")

    def plan_request(
        self, tenant_id: str, in_header: DataClassification | None = None
    ) -> PlanRequest:
        needs = self.model_dump(include=set(Needs.model_fields) - {"data_classification"})
        classification = classification_of(self.data_classification, in_header)
        return PlanRequest(tenant_id=tenant_id, data_classification=classification, **needs)


class ResolveBody(Needs):
    run_id: uuid.UUID = Field(alias="runId")
    profile_id: str = Field(alias="profileId", min_length=1, max_length=200)


class RoutePlanView(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    route_plan_id: uuid.UUID = Field(alias="routePlanId")
    tenant_id: str = Field(alias="tenantId")  # the spec's RoutePlan field
    run_id: uuid.UUID = Field(alias="runId")
    profile_id: str = Field(alias="profileId")
    profile_version: str = Field(alias="profileVersion")
    policy_revision: str = Field(alias="policyRevision")
    policy_decision_id: uuid.UUID | None = Field(alias="policyDecisionId")
    snapshot_version: int | None = Field(alias="snapshotVersion")
    candidates: list[str]
    constraints: dict[str, Any]
    resolved_at: datetime = Field(alias="resolvedAt")


class PolicyBody(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    revision: str = Field(min_length=1, max_length=100)
    policy: dict[str, Any] = Field(description="TenantPolicy fields except tenantId and revision")


@router.post(
    "/factory/model-profiles/{profileId}/route-plan/preview",
    response_model=RoutePlanResult,
    operation_id="PreviewRoutePlan",
)
async def preview(
    profileId: str,
    principal: Reader,
    runtime: RuntimeDep,
    body: Needs | None = None,
) -> RoutePlanResult:
    needs = body or Needs()
    return await runtime.routes.decide(needs.plan_request(principal.tenant_id), profileId)


@router.post(
    "/gateway/route-plans",
    response_model=RoutePlanView,
    operation_id="ResolveRoutePlan",
    responses={200: {"description": "The run's existing plan"}, 201: {"description": "Resolved"}},
)
async def resolve(
    body: ResolveBody,
    principal: Invoker,
    runtime: RuntimeDep,
    response: Response,
    classification: ClassificationHeader = None,
) -> RoutePlanView:
    tenant = principal.tenant_id
    try:
        row, created = await runtime.routes.pin(
            body.plan_request(tenant, classification), body.profile_id, body.run_id
        )
    except Refusal as refused:
        raise problem_of(refused, lambda ids: _come_back(runtime, tenant, ids)) from None
    response.status_code = 201 if created else 200
    return RoutePlanView.model_validate(row, from_attributes=True)


def _come_back(runtime: Runtime, tenant: str, waiting_on: list[str]) -> int:
    come_back = runtime.invoke.come_back
    if come_back is None:  # Temporal not reached yet: no breakers to ask
        return runtime.settings.invoke_unavailable_retry_after_max_seconds
    return come_back.none_routable(tenant, waiting_on)


@router.get("/factory/tenant-policy", response_model=TenantPolicy, operation_id="GetTenantPolicy")
async def get_policy(principal: Reader, session: SessionDep) -> TenantPolicy:
    return await load_policy(session, principal.tenant_id)


@router.put("/factory/tenant-policy", response_model=TenantPolicy, operation_id="PutTenantPolicy")
async def put_policy(body: PolicyBody, principal: Admin, runtime: RuntimeDep) -> TenantPolicy:
    """Publish the revision and make it the tenant's policy. A revision names one set of rules
    for good: one published before with other rules is a 409 naming `revision`; with the same
    rules it is the policy again (a rollback to it)."""
    try:
        policy = TenantPolicy.model_validate(
            {**body.policy, "tenantId": principal.tenant_id, "revision": body.revision}
        )
    except ValidationError as exc:
        raise invalid_body(exc, "policy") from None
    document = policy.model_dump(mode="json", by_alias=True, exclude={"tenant_id", "revision"})
    taken = Problem(409, "This policy revision exists with other rules.", field="body.revision")
    try:
        await _publish(runtime, principal.tenant_id, body.revision, document)
    except routing_settings.PolicyRevisionTaken:
        raise taken from None
    except IntegrityError:
        # Another PUT of this revision committed it between this one's read and its insert:
        # the history's primary key decided, and this attempt wrote nothing. Once more, this
        # PUT finds that one's rows, and is its replay or other rules under its revision, as
        # had it come second; a second lost race is answered as taken too, never a 500.
        try:
            await _publish(runtime, principal.tenant_id, body.revision, document)
        except (routing_settings.PolicyRevisionTaken, IntegrityError):
            raise taken from None
    return policy


async def _publish(
    runtime: Runtime, tenant_id: str, revision: str, document: dict[str, Any]
) -> None:
    """One attempt in its own transaction: a refusal or a lost race leaves nothing written."""
    async with transaction(runtime.sessions) as session:
        await routing_settings.put_policy(session, tenant_id, revision, document)


@router.get("/factory/routing/weights", response_model=Weights, operation_id="GetRoutingWeights")
async def get_weights(principal: Reader, session: SessionDep) -> Weights:
    """The weights the caller's tenant routes with: its own, else the platform-wide default."""
    return (await load_weights(session, principal.tenant_id))[1]


@router.put("/factory/routing/weights", response_model=Weights, operation_id="PutRoutingWeights")
async def put_weights(body: Weights, principal: Admin, runtime: RuntimeDep) -> Weights:
    """Set the caller's tenant's weights; no other tenant's routes move."""
    # Narrower than the policy's Admin: weights re-rank every route of the tenant at once.
    if "PlatformAdmin" not in principal.roles:
        raise Problem(403, "Setting the tenant's routing weights needs the role PlatformAdmin.")
    async with transaction(runtime.sessions) as session:
        await routing_settings.put_weights(session, principal.tenant_id, body)
    return body
