"""Model deployments: register, list, get, license, approve, retire (a repeat answered with the
retired deployment)."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Body, Depends
from fastapi.responses import JSONResponse
from sqlalchemy.ext.asyncio import AsyncSession

from activities.lifecycle_types import ApproveRequest
from activities.secret_policy import secret_policy
from api import evaluations, lifecycle
from api.deps import RuntimeDep, SessionDep, TemporalDep, require
from api.evaluations import EvaluationView
from api.idempotency import IdempotencyKey, IdempotencyStore, request_hash
from api.problems import UNREADABLE_TYPE, Problem, field_refused
from api.schemas import ApproveBody, DeploymentView
from api.views import deployment_views
from core.security import Principal
from domain.access import Action
from domain.deployments import (
    DeploymentRecord,
    DeploymentRegistration,
    LicenseMetadata,
    registered_as,
)
from domain.enums import Scope
from domain.lifecycle import Transition
from store.repositories import ModelDeploymentRepository
from store.tables import ModelDeploymentRow
from store.views import deployment_record, reads_as_record

log = logging.getLogger("model_router.api")

router = APIRouter(prefix="/factory/model-deployments", tags=["deployments"])

Admin = Annotated[Principal, Depends(require(Scope.MODELS_ADMIN, Action.MANAGE_DEPLOYMENTS))]
Viewer = Annotated[Principal, Depends(require(Scope.MODELS_ADMIN, Action.READ_DEPLOYMENTS))]


def unreadable(deployment_id: str) -> Problem:
    """The 409 for a deployment whose stored row does not read: what is wrong and what to do,
    never the stored values (a hand-written row may hold anything)."""
    return Problem(
        409,
        f"Deployment {deployment_id!r}'s stored record does not read as this version reads it "
        "(written before a rule was tightened, or by hand): correct the row, then ask again.",
        field="deploymentId",
        type_=UNREADABLE_TYPE,
    )


@router.post(
    "",
    status_code=201,
    response_model=DeploymentRecord,
    operation_id="RegisterDeployment",
    responses={409: {"description": "Id already registered, or the key was used for another body"}},
)
async def register_deployment(
    body: DeploymentRegistration,
    idempotency_key: IdempotencyKey,
    principal: Admin,
    temporal: TemporalDep,
    runtime: RuntimeDep,
) -> JSONResponse:
    policy = secret_policy(runtime.settings)
    refused = policy.refusal(body.endpoint_ref) or policy.tenant_refusal(
        body.endpoint_ref, principal.tenant_id
    )
    if refused:
        raise field_refused(
            "body.endpointRef",
            refused,
            f"endpointRef {body.endpoint_ref!r} is not allowed: {refused}.",
        )
    keys = IdempotencyStore(runtime.sessions, principal.tenant_id, "RegisterDeployment")
    hash_ = request_hash(body.model_dump(mode="json", by_alias=True))
    replay = await keys.replay(idempotency_key, hash_)
    if replay is not None:
        # Replayed as it was answered, its Location too: a client following it after a lost
        # answer found none.
        return _located(replay, body.deployment_id) if replay.status_code == 201 else replay
    try:
        return await _register(runtime, temporal, principal, idempotency_key, body, keys, hash_)
    except Exception:
        await keys.release(idempotency_key, hash_)
        raise


async def _register(
    runtime: RuntimeDep,
    temporal: TemporalDep,
    principal: Admin,
    idempotency_key: str,
    body: DeploymentRegistration,
    keys: IdempotencyStore,
    hash_: str,
) -> JSONResponse:
    """The registration the key reserved, and its answer stored."""
    result = await lifecycle.register(
        temporal, runtime.settings.temporal_task_queue, principal.tenant_id, idempotency_key, body
    )
    if not result.created:
        raise Problem(
            409,
            f"Deployment {body.deployment_id!r} is already registered.",
            field="deploymentId",
            state=result.deployment.state.value,
        )
    if not registered_as(body, result.deployment):
        # The key's first request registered other fields, and its answer was never stored
        # (a 503, a store blip): this body was answered 201 for a registration never applied.
        raise Problem(
            409,
            "This Idempotency-Key registered the deployment with other fields.",
            field="header.Idempotency-Key",
            type_="https://model-router.dev/problems/idempotency-key-reused",
        )
    answer = await keys.remember(
        idempotency_key, hash_, 201, result.deployment.model_dump(mode="json", by_alias=True)
    )
    return _located(answer, body.deployment_id)


def _located(answer: JSONResponse, deployment_id: str) -> JSONResponse:
    answer.headers["Location"] = f"/factory/model-deployments/{deployment_id}"
    return answer


@router.get("", response_model=list[DeploymentView], operation_id="ListModelDeployments")
async def list_deployments(principal: Viewer, session: SessionDep) -> list[DeploymentView]:
    """A row that does not read is left out, and logged by id, not marked: an entry in the
    list is a whole DeploymentView (the spec's fields, license metadata among them), and one
    without its license would read to a client as "no license recorded". One such row made the
    whole list a 500; its own GET answers the 409 that says what to correct."""
    rows: list[ModelDeploymentRow] = []
    for row in await ModelDeploymentRepository(session, principal.tenant_id).list():
        if reads_as_record(row):
            rows.append(row)
        else:
            log.warning(
                "deployment left out of the list: its stored record does not read",
                extra={"deployment": row.deployment_id},
            )
    return await deployment_views(session, principal.tenant_id, rows)


@router.post(
    "/{deploymentId:path}/approve",
    response_model=DeploymentRecord,
    operation_id="ApproveDeployment",
)
async def approve_deployment(
    deploymentId: str,
    principal: Admin,
    temporal: TemporalDep,
    runtime: RuntimeDep,
    body: Annotated[ApproveBody | None, Body()] = None,
) -> DeploymentRecord:
    request = ApproveRequest(intended_use=(body or ApproveBody()).intended_use)
    return await lifecycle.transition(
        temporal,
        runtime.sessions,
        runtime.settings.temporal_task_queue,
        principal.tenant_id,
        deploymentId,
        Transition.APPROVE,
        request,
        actor=principal,
    )


@router.post(
    "/{deploymentId:path}/evaluate",
    status_code=202,
    response_model=EvaluationView,
    operation_id="EvaluateDeployment",
)
async def evaluate_deployment(
    deploymentId: str,
    idempotency_key: IdempotencyKey,
    principal: Admin,
    temporal: TemporalDep,
    runtime: RuntimeDep,
) -> EvaluationView:
    """Run the capability suite against the deployment through its real adapter."""
    return await evaluations.start(
        temporal,
        runtime.sessions,
        runtime.settings.temporal_task_queue,
        runtime.settings.evaluation_concurrency,
        principal.tenant_id,
        deploymentId,
        idempotency_key,
    )


@router.post(
    "/{deploymentId:path}/retire", response_model=DeploymentRecord, operation_id="RetireDeployment"
)
async def retire_deployment(
    deploymentId: str,
    principal: Admin,
    temporal: TemporalDep,
    runtime: RuntimeDep,
) -> DeploymentRecord:
    try:
        return await lifecycle.transition(
            temporal,
            runtime.sessions,
            runtime.settings.temporal_task_queue,
            principal.tenant_id,
            deploymentId,
            Transition.RETIRE,
            actor=principal,
        )
    except Problem as problem:
        # Retired already (a retry after a timeout that applied it after all, two operators at
        # once): a repeat, done as the console counts it, answered as approving again is.
        if not lifecycle.already_done(problem, Transition.RETIRE):
            raise
    return await _stored(runtime, principal.tenant_id, deploymentId)


async def _stored(runtime: RuntimeDep, tenant_id: str, deployment_id: str) -> DeploymentRecord:
    """The deployment as the store holds it."""
    async with runtime.sessions() as session:
        return deployment_record(await _readable(session, tenant_id, deployment_id))


async def _readable(
    session: AsyncSession, tenant_id: str, deployment_id: str
) -> ModelDeploymentRow:
    """The deployment's row: a 404 when there is none, a 409 when it no longer reads."""
    row = await ModelDeploymentRepository(session, tenant_id).get(deployment_id)
    if row is None:
        raise Problem(404, f"No deployment {deployment_id!r}.", field="deploymentId")
    if not reads_as_record(row):
        raise unreadable(deployment_id)
    return row


@router.put(
    "/{deploymentId:path}/license",
    response_model=DeploymentRecord,
    operation_id="RecordDeploymentLicense",
)
async def record_license(
    deploymentId: str,
    body: LicenseMetadata,
    principal: Admin,
    temporal: TemporalDep,
    runtime: RuntimeDep,
) -> DeploymentRecord:
    return await lifecycle.transition(
        temporal,
        runtime.sessions,
        runtime.settings.temporal_task_queue,
        principal.tenant_id,
        deploymentId,
        Transition.RECORD_LICENSE,
        body,
        actor=principal,
    )


@router.get(
    "/{deploymentId:path}", response_model=DeploymentView, operation_id="GetModelDeployment"
)
async def get_deployment(
    deploymentId: str,
    principal: Viewer,
    runtime: RuntimeDep,
) -> DeploymentView:
    # A session of its own, closed before Temporal is asked: held across those calls (the
    # console asks every second while an evaluation runs), a slow Temporal held a pooled
    # connection per request, the pool the invoke path's plan and replay reads share.
    async with runtime.sessions() as session:
        row = await _readable(session, principal.tenant_id, deploymentId)
        view = (await deployment_views(session, principal.tenant_id, [row]))[0]
    view.evaluation = await evaluations.latest(
        await runtime.temporal(), runtime.sessions, principal.tenant_id, deploymentId
    )
    return view
