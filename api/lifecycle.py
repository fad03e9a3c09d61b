"""Calls into the per-deployment lifecycle workflow, with Temporal's errors turned into
problems an operator can act on."""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client, WithStartWorkflowOperation, WorkflowUpdateFailedError
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from activities.lifecycle_types import LifecycleInput, RegisterCandidateResult, RegisterRequest
from api.problems import Problem
from domain.deployments import DeploymentRecord, DeploymentRegistration
from store.repositories import ModelDeploymentRepository
from workflows.deployment_lifecycle import (
    ILLEGAL,
    REFUSED,
    DeploymentLifecycleWorkflow,
    workflow_id,
)

# The API waits this long for the worker; past it the caller gets a 503 it can retry
# (the keyed request then replays the same workflow, never a second one).
CALL_TIMEOUT_S = 30.0

_TYPE = "https://model-router.dev/problems/"
ILLEGAL_TRANSITION = _TYPE + "illegal-transition"


async def register(
    client: Client,
    task_queue: str,
    tenant_id: str,
    idempotency_key: str,
    registration: DeploymentRegistration,
) -> RegisterCandidateResult:
    start = WithStartWorkflowOperation(
        DeploymentLifecycleWorkflow.run,
        LifecycleInput(
            tenant_id=tenant_id,
            deployment_id=registration.deployment_id,
            registration=registration,
            idempotency_key=idempotency_key,
        ),
        id=workflow_id(tenant_id, registration.deployment_id),
        task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        # A retired deployment's workflow has closed; its id is not reused for a new one.
        id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
    )
    try:
        return await asyncio.wait_for(
            client.execute_update_with_start_workflow(
                DeploymentLifecycleWorkflow.register,
                RegisterRequest(idempotency_key=idempotency_key),
                start_workflow_operation=start,
            ),
            CALL_TIMEOUT_S,
        )
    except RPCError as exc:
        if exc.status is RPCStatusCode.ALREADY_EXISTS:
            raise Problem(
                409,
                f"Deployment {registration.deployment_id!r} was registered and retired; "
                "register it under a new id.",
                field="deploymentId",
                state="Retired",
            ) from None
        raise
    except TimeoutError:
        raise Problem(503, "The worker did not answer in time; retry with the same key.") from None


async def transition(
    client: Client,
    sessions: async_sessionmaker[AsyncSession],
    tenant_id: str,
    deployment_id: str,
    update: str,
    arg: Any = None,
) -> DeploymentRecord:
    handle = client.get_workflow_handle(workflow_id(tenant_id, deployment_id))
    args = [] if arg is None else [arg]
    try:
        return await asyncio.wait_for(
            handle.execute_update(update, args=args, result_type=DeploymentRecord),
            CALL_TIMEOUT_S,
        )
    except WorkflowUpdateFailedError as exc:
        cause = exc.cause
        if isinstance(cause, ApplicationError) and cause.type == ILLEGAL:
            state = cause.details[0] if cause.details else None
            raise Problem(409, f"{cause.message}.", state=state, type_=ILLEGAL_TRANSITION) from None
        if isinstance(cause, ApplicationError) and cause.type == REFUSED:
            refusals = list(cause.details[0]) if cause.details else []
            detail = "Approval refused: " + "; ".join(r["message"] for r in refusals) + "."
            raise Problem(
                409, detail, refusals=refusals, type_=_TYPE + "approval-refused"
            ) from None
        raise
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            await _not_found_or_closed(sessions, tenant_id, deployment_id)
        raise
    except TimeoutError:
        raise Problem(503, "The worker did not answer in time; try again.") from None


async def _not_found_or_closed(
    sessions: async_sessionmaker[AsyncSession], tenant_id: str, deployment_id: str
) -> None:
    async with sessions() as session:
        row = await ModelDeploymentRepository(session, tenant_id).get(deployment_id)
    if row is None:
        raise Problem(404, f"No deployment {deployment_id!r}.", field="deploymentId")
    raise Problem(
        409,
        f"Deployment {deployment_id!r} is {row.state.value}; its lifecycle has ended.",
        state=row.state.value,
        type_=ILLEGAL_TRANSITION,
    )
