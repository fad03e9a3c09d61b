"""Model deployments: register (through Temporal), list, get."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Response
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy

from api.deps import SessionDep, SettingsDep, TemporalDep, require
from api.problems import Problem
from core.security import Principal
from domain.access import Action
from domain.deployments import DeploymentRecord, DeploymentRegistration
from domain.enums import Scope
from store.repositories import ModelDeploymentRepository
from store.views import deployment_record
from workflows.register_deployment import RegisterDeploymentWorkflow

router = APIRouter(prefix="/factory/model-deployments", tags=["deployments"])

Admin = Annotated[Principal, Depends(require(Scope.MODELS_ADMIN, Action.MANAGE_DEPLOYMENTS))]
Viewer = Annotated[Principal, Depends(require(Scope.MODELS_ADMIN, Action.READ_DEPLOYMENTS))]


@router.post(
    "",
    status_code=201,
    response_model=DeploymentRecord,
    operation_id="RegisterDeployment",
    responses={409: {"description": "A deployment with this id exists in the tenant"}},
)
async def register_deployment(
    body: DeploymentRegistration,
    principal: Admin,
    temporal: TemporalDep,
    settings: SettingsDep,
    response: Response,
) -> DeploymentRecord:
    result = await temporal.execute_workflow(
        RegisterDeploymentWorkflow.run,
        args=[principal.tenant_id, body],
        id=f"register-deployment/{principal.tenant_id}/{body.deployment_id}",
        task_queue=settings.temporal_task_queue,
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )
    if not result.created:
        raise Problem(
            409,
            f"Deployment {body.deployment_id!r} is already registered.",
            field="deploymentId",
            state=result.deployment.state.value,
        )
    response.headers["Location"] = f"/factory/model-deployments/{body.deployment_id}"
    return result.deployment


@router.get("", response_model=list[DeploymentRecord], operation_id="ListModelDeployments")
async def list_deployments(principal: Viewer, session: SessionDep) -> list[DeploymentRecord]:
    rows = await ModelDeploymentRepository(session, principal.tenant_id).list()
    return [deployment_record(r) for r in rows]


@router.get(
    "/{deploymentId:path}", response_model=DeploymentRecord, operation_id="GetModelDeployment"
)
async def get_deployment(
    deploymentId: str,
    principal: Viewer,
    session: SessionDep,
) -> DeploymentRecord:
    row = await ModelDeploymentRepository(session, principal.tenant_id).get(deploymentId)
    if row is None:
        raise Problem(404, f"No deployment {deploymentId!r}.", field="deploymentId")
    return deployment_record(row)
