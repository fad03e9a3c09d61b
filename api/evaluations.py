"""Starting evaluations and reporting their progress."""

from __future__ import annotations

import hashlib
import logging
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col, select
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from activities.evaluation_types import EvaluationInput, Progress
from api.lifecycle import ILLEGAL_TRANSITION
from api.problems import UNREADABLE_TYPE, Problem
from domain.lifecycle import can_evaluate
from domain.suite import SUITE_VERSION
from store import evaluations
from store.db import transaction
from store.repositories import ModelDeploymentRepository
from store.tables import EvaluationRow
from store.views import reads_as_record
from workflows.evaluate import EvaluateDeploymentWorkflow

log = logging.getLogger("model_router.api")

# How long a Running row may be without its workflow before it is settled as never started: a
# start is answered in milliseconds, or refused within the SDK's retries (about 10 s).
UNSTARTED_GRACE_SECONDS = 60.0
# Why such a row was settled Failed: the same key again starts its run (`start`).
NEVER_STARTED = "its run was never started; evaluate again"


class EvaluationView(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    evaluation_id: str = Field(alias="evaluationId")
    status: str
    suite_version: str = Field(alias="suiteVersion")
    reason: str | None = None
    evidence_ref: str | None = Field(default=None, alias="evidenceRef")
    summary: dict[str, Any] | None = None
    progress: Progress | None = None
    started_at: datetime = Field(alias="startedAt")
    ended_at: datetime | None = Field(default=None, alias="endedAt")


# `evaluations.evaluation_id` is VARCHAR(300), and the evaluation's workflow id, Temporal's SQL
# visibility keeps in VARCHAR(255) (`limit.maxIDLength`). A tenant id (up to 100 characters)
# and a deployment id (up to 200) make up to 335 with the rest: such an id reached PostgreSQL
# and was a 500 (2026-12-04). The deployment id's digest stands in for it in an id that long.
EVALUATION_ID_MAX_LENGTH = 255


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def evaluation_id(tenant_id: str, deployment_id: str, key: str) -> str:
    """One id per tenant, deployment and key, readable where it fits its column."""
    eid = f"evaluate/{tenant_id}/{deployment_id}/{_digest(key)}"
    if len(eid) <= EVALUATION_ID_MAX_LENGTH:
        return eid
    return f"evaluate/{tenant_id}/{_digest(deployment_id)}/{_digest(key)}"


async def start(
    client: Client,
    sessions: async_sessionmaker[AsyncSession],
    task_queue: str,
    concurrency: int,
    tenant_id: str,
    deployment_id: str,
    key: str,
) -> EvaluationView:
    """One evaluation per key: the same key again answers with the evaluation it started. A
    deployment that does not exist is a 404, one that cannot be evaluated now (Retired) a 409,
    one whose stored row does not read as its record a 409 as well, for every surface that
    starts one (the console's form used to start it all the same)."""
    async with sessions() as session:
        row = await ModelDeploymentRepository(session, tenant_id).get(deployment_id)
    if row is None:
        raise Problem(404, f"No deployment {deployment_id!r}.", field="deploymentId")
    if not can_evaluate(row.state):
        raise Problem(
            409,
            f"Deployment {deployment_id!r} is {row.state.value}; it cannot be evaluated.",
            field="deploymentId",
            state=row.state.value,
            type_=ILLEGAL_TRANSITION,
        )
    if not reads_as_record(row):
        # Accepted, it ran every case against the provider (billed), then failed as the
        # import refused the row, pydantic's message quoting the stored values as its reason.
        # Refused before anything is claimed or started, as the row's GET and every
        # transition are (api/routers/deployments.py `unreadable`), without the values.
        raise Problem(
            409,
            f"Deployment {deployment_id!r}'s stored record does not read as this version reads "
            "it (written before a rule was tightened, or by hand): correct the row, then ask "
            "again.",
            field="deploymentId",
            type_=UNREADABLE_TYPE,
        )
    eid = evaluation_id(tenant_id, deployment_id, key)
    await _none_running_but(client, sessions, tenant_id, deployment_id, eid)
    try:
        async with transaction(sessions) as session:
            # Looked for again, and inserted, under the deployment's lock held to the commit:
            # two keys at the same moment each found none running above, and both ran the
            # suite. No Temporal call under the lock: a row still Running here was settled
            # above if its run had ended, or is a start that got in first.
            await evaluations.lock_deployment(session, tenant_id, deployment_id)
            found = await session.get(EvaluationRow, eid)
            # Its key again after its row was settled as never started (the 503 said "retry
            # with the same key"): the run is started now, so the row says Running again.
            # Left Failed, the run started behind it, and another key, finding none running,
            # ran a second suite beside it.
            again = found is not None and found.status == "Failed" and found.reason == NEVER_STARTED
            if found is None or again:
                under_way = await evaluations.running(session, tenant_id, deployment_id)
                if under_way is not None:
                    raise _running(deployment_id, under_way)
            if found is not None and again:
                evaluations.reopen(found)
            else:
                await evaluations.insert_running(
                    session, eid, tenant_id, deployment_id, SUITE_VERSION
                )
            # Its run is started only for a row this request inserted or reopened, or one
            # still Running (its start not answered, or under way). A key whose evaluation
            # ended answers with it and starts nothing: its history gone (Temporal's
            # retention, a cluster restored without histories), REJECT_DUPLICATE had nothing
            # to refuse, and a second run of the whole suite was billed, never checked against
            # another key's running evaluation, its outcome written over the first one's row.
            to_start = found is None or again or found.status == "Running"
    except IntegrityError:
        # A concurrent request with the same key inserted it first (SQLite: no lock): its run
        # is started as that request's is, while the row is Running (USE_EXISTING: one run).
        async with sessions() as session:
            found = await session.get(EvaluationRow, eid)
        to_start = found is not None and found.status == "Running"
    if to_start:
        await _start_run(client, task_queue, concurrency, tenant_id, deployment_id, eid)
    view = await latest(client, sessions, tenant_id, deployment_id, eid)
    if view is None:
        raise Problem(503, "The evaluation's row is changing; retry with the same key.")
    return view


async def _start_run(
    client: Client,
    task_queue: str,
    concurrency: int,
    tenant_id: str,
    deployment_id: str,
    eid: str,
) -> None:
    """Start the evaluation's run, or find the one under way."""
    try:
        await client.start_workflow(
            EvaluateDeploymentWorkflow.run,
            EvaluationInput(
                evaluation_id=eid,
                tenant_id=tenant_id,
                deployment_id=deployment_id,
                concurrency=concurrency,
            ),
            id=eid,
            task_queue=task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
        )
    except WorkflowAlreadyStartedError:
        pass  # it ran to its end already; its row says how it went
    except RPCError as exc:
        # Temporal went away after the connect, or its answer did, the start taken: the run
        # may be under way, so its row stays Running, holding the deployment's other keys off
        # (deleted, a second key ran a second suite beside the first, and the first recorded
        # into no row). The same key again starts the run, or finds it. A row whose run never
        # started is settled when read once Temporal says so past the start's grace
        # (`settled`: Failed, "its run was never started").
        log.warning("evaluation start not answered: %s", exc.status.name)
        raise Problem(
            503,
            "Temporal did not answer the evaluation's start; it may not run. Retry with the "
            "same key.",
        ) from None


async def _none_running_but(
    client: Client,
    sessions: async_sessionmaker[AsyncSession],
    tenant_id: str,
    deployment_id: str,
    eid: str,
) -> None:
    """A 409 naming the deployment's evaluation under way, unless `eid` has one (its key again,
    whichever evaluation runs now).
    A second one ran the whole suite against the provider again, billed twice, and the one to
    end last overwrote the other's evidence: the console's Evaluate, Back, Evaluate did it (its
    form has a new key each time it is shown). A row left Running by a run that ended is
    settled first, as when it is read. Two starts with different keys at the same moment both
    pass here: `start` looks again under the deployment's lock before it inserts."""
    async with sessions() as session:
        if await session.get(EvaluationRow, eid) is not None:
            return  # the key's own evaluation, running or ended: it answers as before
        row = await evaluations.running(session, tenant_id, deployment_id)
    if row is None or await settled(client, sessions, row):
        return
    raise _running(deployment_id, row)


def _running(deployment_id: str, row: EvaluationRow) -> Problem:
    return Problem(
        409,
        f"Deployment {deployment_id!r} is being evaluated already ({row.evaluation_id}); "
        "follow that evaluation, or start another once it ended.",
        field="deploymentId",
        evaluationId=row.evaluation_id,
        type_="https://model-router.dev/problems/evaluation-running",
    )


async def latest(
    client: Client | None,
    sessions: async_sessionmaker[AsyncSession],
    tenant_id: str,
    deployment_id: str,
    eid: str | None = None,
) -> EvaluationView | None:
    async with sessions() as session:
        stmt = select(EvaluationRow).where(col(EvaluationRow.tenant_id) == tenant_id)
        stmt = stmt.where(col(EvaluationRow.deployment_id) == deployment_id)
        if eid is not None:
            stmt = stmt.where(col(EvaluationRow.evaluation_id) == eid)
        row = (await session.scalars(stmt.order_by(col(EvaluationRow.started_at).desc()))).first()
    if row is None:
        return None
    if row.status == "Running" and client is not None and await settled(client, sessions, row):
        return await latest(None, sessions, tenant_id, deployment_id, row.evaluation_id)
    view = EvaluationView.model_validate(row, from_attributes=True)
    if row.status == "Running" and client is not None:
        try:
            view.progress = await client.get_workflow_handle(row.evaluation_id).query(
                EvaluateDeploymentWorkflow.progress
            )
        except Exception:
            view.progress = None
    return view


async def settled(
    client: Client, sessions: async_sessionmaker[AsyncSession], row: EvaluationRow
) -> bool:
    """Settle a row still Running whose run is not (whether it did, as the row is read): its
    workflow ended without this row hearing of it, or was never started (a start Temporal did
    not answer, or an API gone between the insert and the start). Such a row stayed Running
    for good, the console's panel polling it each second and `evaluate --wait` waiting on it.
    Called for every read of the row (`latest`) and by another key's start."""
    handle = client.get_workflow_handle(row.evaluation_id)
    try:
        described = await handle.describe()
    except RPCError as exc:
        if exc.status is not RPCStatusCode.NOT_FOUND:
            return False  # Temporal away: nothing is known
        age = (datetime.now(UTC) - row.started_at).total_seconds()
        if age < UNSTARTED_GRACE_SECONDS:  # its start may still be on its way
            return False
        reason = NEVER_STARTED
        ref = None
    else:
        if described.status is WorkflowExecutionStatus.RUNNING:
            return False
        ref = None
        if described.status is WorkflowExecutionStatus.COMPLETED:
            try:
                ref = await handle.result()
            except RPCError:
                return False  # Temporal went away between the two reads
        reason = f"its run ended ({described.status.name if described.status else '?'})"
    async with transaction(sessions) as session:
        # Only a row still Running: its run may have recorded its outcome since it was read.
        # A run that completed imported its evidence; its summary went to no row.
        await evaluations.settle(session, row.tenant_id, row.evaluation_id, ref, reason)
    return True
