"""The API's calls into the per-deployment lifecycle workflow (REST and console), with the
lifecycle client's refusals turned into problems an operator can act on, and one audit line per
state change asked for: who asked (the client id), of which tenant, for which deployment and
transition, and what came of it. Nothing else records the actor: the deployment's events name
the state, not who asked for it."""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client, WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.service import RPCError

from activities.lifecycle_client import (
    LifecycleClient,
    LifecycleClosed,
    LifecycleRefused,
    LifecycleTimeout,
)
from activities.lifecycle_types import (
    CONFLICT,
    NOT_FOUND,
    REFUSED,
    ROW_UNREADABLE,
    UNREADABLE,
    RegisterCandidateResult,
)
from api.problems import UNREADABLE_TYPE, Problem
from core.security import Principal
from domain.deployments import DeploymentRecord, DeploymentRegistration
from domain.lifecycle import Transition, target_of
from store.repositories import ModelDeploymentRepository
from store.views import deployment_record

# The API waits this long for the worker; past it the caller gets a 503 it can retry
# (the keyed request then replays the same workflow, never a second one).
CALL_TIMEOUT_S = 30.0

_TYPE = "https://model-router.dev/problems/"
ILLEGAL_TRANSITION = _TYPE + "illegal-transition"
# How soon to come back when Temporal did not answer: a restart or failover takes seconds.
TEMPORAL_RETRY_AFTER = "5"
# The operator's own words on a change (the console's Retire asks for them), logged, never
# stored: the spec has no field for them. Bounded so a line stays a line.
REASON_MAX = 200

audit = logging.getLogger("model_router.audit")


def _temporal_away(retry: str) -> Problem:
    """Temporal did not answer the call (the SDK gave up retrying, about 10 s), or the update's
    own RPC timed out: nothing is known to have changed, and the same request may be sent
    again (a keyed registration replays its workflow, a transition already applied is a
    no-op or a 409 naming the state)."""
    return Problem(
        503,
        f"Temporal did not answer; {retry}.",
        # As the invoke path's refusal names it (api/surface.py, docs/runbook.md).
        type_=_TYPE + "temporal-unavailable",
        headers={"Retry-After": TEMPORAL_RETRY_AFTER},
        reason="temporal-unreachable",
    )


def _worker_away(retry: str) -> Problem:
    """The worker did not answer within the call's bound: as Temporal away, the same request
    may be sent again."""
    return Problem(
        503,
        f"The worker did not answer in time; {retry}.",
        type_=_TYPE + "worker-unavailable",
        headers={"Retry-After": TEMPORAL_RETRY_AFTER},
    )


async def register(
    client: Client,
    task_queue: str,
    tenant_id: str,
    idempotency_key: str,
    registration: DeploymentRegistration,
) -> RegisterCandidateResult:
    try:
        return await LifecycleClient(client, timeout=CALL_TIMEOUT_S).register(
            task_queue, tenant_id, idempotency_key, registration
        )
    except LifecycleClosed:
        raise Problem(
            409,
            f"Deployment {registration.deployment_id!r} was registered and retired; "
            "register it under a new id.",
            field="deploymentId",
            state="Retired",
        ) from None
    except LifecycleTimeout:
        raise _worker_away("retry with the same key") from None
    except (RPCError, WorkflowUpdateRPCTimeoutOrCancelledError):
        # Uncaught, a 500 for Temporal gone after the API had connected.
        raise _temporal_away("retry with the same key") from None


def already_done(problem: Problem, transition: Transition) -> bool:
    """The refusal says the deployment is already where the transition leads: a repeat (a
    double-clicked Retire, a retry after a timeout that applied it after all), not a failure."""
    target = target_of(transition)
    return (
        problem.type == ILLEGAL_TRANSITION
        and target is not None
        and problem.extensions.get("state") == target.value
    )


def _said(reason: str | None) -> str | None:
    """The reason as one bounded, printable line: it is the operator's free text."""
    if not reason:
        return None
    line = "".join(c for c in " ".join(reason.split()) if c.isprintable())
    return line[:REASON_MAX] or None


def _audit(
    actor: Principal,
    tenant_id: str,
    deployment_id: str,
    transition: Transition,
    outcome: str,
    reason: str | None,
) -> None:
    # Tenant and reason in the message as well as in `extra`: the plain-text lines
    # (MODEL_ROUTER_LOG_JSON=false) print the message only, and the console tells the operator
    # their reason is written to the audit log. The reason is repr-quoted, so its end is plain;
    # so is the deployment id, which a console form carries as typed (the API's paths refuse
    # control characters; a form's field did not): `x\n<a forged line>` wrote a second,
    # forged audit line to plain-text logs.
    said = _said(reason)
    audit.info(
        "lifecycle %s of %r for tenant %s asked by %s: %s%s",
        transition.value,
        deployment_id,
        tenant_id,
        actor.client_id,
        outcome,
        f"; reason {said!r}" if said else "",
        extra={
            "client": actor.client_id,
            "tenant": tenant_id,
            "deployment": deployment_id,
            "outcome": outcome,
            "reason": said,
        },
    )


async def transition(
    client: Client,
    sessions: async_sessionmaker[AsyncSession],
    task_queue: str,
    tenant_id: str,
    deployment_id: str,
    transition: Transition,
    arg: Any = None,
    *,
    actor: Principal,
    reason: str | None = None,
) -> DeploymentRecord:
    """The transition applied, or refused as a problem; either way one audit line naming
    `actor`, the principal that asked (required: a line with no one named records nothing),
    and the operator's `reason`."""
    try:
        record = await _transition(
            client, sessions, task_queue, tenant_id, deployment_id, transition, arg
        )
    except Problem as problem:
        repeat = already_done(problem, transition)
        state = problem.extensions.get("state")
        said = f"already {state}" if repeat else f"refused {problem.status}"
        _audit(actor, tenant_id, deployment_id, transition, said, reason)
        raise
    except Exception as exc:
        _audit(
            actor, tenant_id, deployment_id, transition, f"failed ({type(exc).__name__})", reason
        )
        raise
    _audit(actor, tenant_id, deployment_id, transition, f"done: {record.state.value}", reason)
    return record


async def _transition(
    client: Client,
    sessions: async_sessionmaker[AsyncSession],
    task_queue: str,
    tenant_id: str,
    deployment_id: str,
    transition: Transition,
    arg: Any,
) -> DeploymentRecord:
    async def stored() -> DeploymentRecord | None:
        async with sessions() as session:
            row = await ModelDeploymentRepository(session, tenant_id).get(deployment_id)
        return deployment_record(row) if row is not None else None

    try:
        return await LifecycleClient(client, timeout=CALL_TIMEOUT_S).transition(
            tenant_id, deployment_id, transition, arg, resume=(task_queue, stored)
        )
    except LifecycleRefused as exc:
        if exc.illegal:
            raise Problem(
                409, f"{exc.message}.", state=exc.state, type_=ILLEGAL_TRANSITION
            ) from None
        if exc.kind == REFUSED:
            detail = "Approval refused: " + "; ".join(r["message"] for r in exc.refusals) + "."
            raise Problem(
                409, detail, refusals=exc.refusals, type_=_TYPE + "approval-refused"
            ) from None
        if exc.kind == NOT_FOUND:
            raise Problem(404, f"No deployment {deployment_id!r}.", field="deploymentId") from None
        if exc.kind in (UNREADABLE, ROW_UNREADABLE):
            raise Problem(
                409,
                f"Deployment {deployment_id!r}'s stored record does not read as this version "
                "reads it (written before a rule was tightened, or by hand): correct the row "
                "or the profile, then ask again.",
                field="deploymentId",
                type_=UNREADABLE_TYPE,
            ) from None
        if exc.kind == CONFLICT:
            raise Problem(
                409,
                f"Deployment {deployment_id!r} changed while this transition was applied; "
                "read it and decide again.",
                field="deploymentId",
            ) from None
        # Any other failure of a step: nothing applied, and the same transition may be asked
        # again. Uncaught, a 500.
        raise Problem(
            503,
            "The transition was not applied; try again.",
            headers={"Retry-After": TEMPORAL_RETRY_AFTER},
        ) from None
    except LifecycleClosed:
        await _not_found_or_closed(sessions, tenant_id, deployment_id)
        raise
    except LifecycleTimeout:
        raise _worker_away("try again") from None
    except (RPCError, WorkflowUpdateRPCTimeoutOrCancelledError):
        raise _temporal_away("try again") from None


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
