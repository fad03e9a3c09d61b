"""The receipt sweeper's activity: close receipts still open whose InvokeModel workflow is not
running — past the invocation budget when it ran and ended (it failed, was terminated), and
sooner, past the start's bound (`domain.sweep`), when it was never started because its API
process died between the claim and Temporal's acceptance of the start. Failed, usage Unknown,
close reason `swept`, counted in `receipts_swept` and, as every receipt with its ModelInvoked
is, in `invocations` (outcome Failed). A receipt whose workflow still runs is left to it: the
workflow retries its close until the store answers, and its summary is what the caller was
told."""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import logging
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col
from temporalio import activity
from temporalio.client import WorkflowExecutionStatus
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from activities.invoke_outcomes import count_outcome
from core import metrics
from domain.enums import InvocationOutcome
from domain.invocation import invoke_workflow_id
from domain.sweep import PruneArtifactsInput, SweepInput, SweepReport, Workflow, to_sweep
from store import receipts
from store.artifact_files import VolumeStalled
from store.artifacts import ArtifactStore
from store.db import transaction
from store.event_retention import prune_run_events
from store.receipt_statements import ReceiptStatements
from store.tables import InvocationReceiptRow, ModelDeploymentRow

log = logging.getLogger("model_router.sweeper")

# How long a run's purge goes through the folders of the minutes behind it (a catch-up after an
# outage): a fifth of the attempt's 5 minutes, so the run ends well within its 10 and the next
# tick sweeps; the rest is the next runs'.
PURGE_BUDGET_SECONDS = 60.0
# One statement's deletions, and statements a run makes at most.
PRUNE_BATCH = 5_000
PRUNE_BATCHES = 10
# A swept receipt's profile or provider when its row or its deployment's is gone.
UNKNOWN = "unknown"


def _prune_failed(step: str, exc: Exception) -> ApplicationError:
    """A prune's failure as the workflow sees it: its type alone, logged here by type (and an
    OSError's errno by name), never its text: an OSError's names the answer's path, a
    database error's may quote its statement."""
    kind = type(exc).__name__
    code = errno.errorcode.get(exc.errno or 0) if isinstance(exc, OSError) else None
    detail = f"{kind} ({code})" if code else kind
    log.warning("%s failed, left to the sweeper's next run: %s", step, detail)
    return ApplicationError(f"{step} failed: {detail}", type=kind)


class SweeperActivities:
    def __init__(
        self, sessions: async_sessionmaker[AsyncSession], artifacts: ArtifactStore | None = None
    ) -> None:
        self._sessions = sessions
        self._statements = ReceiptStatements(sessions.kw["bind"])
        self._artifacts = artifacts
        # The purge's own thread (prune_artifacts), made on its first run, and the purge on it.
        self._purges: concurrent.futures.ThreadPoolExecutor | None = None
        self._purging: concurrent.futures.Future[int] | None = None

    @activity.defn(name="prune_artifacts")
    async def prune_artifacts(self, data: PruneArtifactsInput) -> int:
        """Stored answers past their retention, in one folder of each tenant (the run's slot),
        and in those of the minutes since the last run's (ticks the schedule skipped while a
        run went on): the artifact volume grew without end, and once full every answer's write
        failed (each replay of those keys then had no answer). This worker's clock names the
        minutes, as the cursor's were.

        On a thread of its own: it walks a directory, and a volume gone quiet holds that walk
        for as long as it stalls. On the loop's default executor (asyncio.to_thread) each
        stalled attempt held one of its few threads (min(32, cpus + 4)), the ones aiohttp's
        resolver looks host names up on: after a few, every probe, evaluation case and
        statement fetch of this worker waited on DNS. A purge still on that thread (an attempt
        past its timeout, the volume stalled) refuses the next at once, as VolumeStalled: one
        purge at a time per volume (`purge_since`), and no attempt queued behind it."""
        if self._artifacts is None:
            return 0
        artifacts, age = self._artifacts, timedelta(days=data.retention_days).total_seconds()
        minute = int(time.time() // 60)

        def purge() -> int:
            return artifacts.purge_since(data.slots, minute, age, PURGE_BUDGET_SECONDS)

        try:
            if self._purging is not None and not self._purging.done():
                raise VolumeStalled("the last purge has not returned")
            if self._purges is None:
                self._purges = concurrent.futures.ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix="artifact_purge"
                )
            self._purging = self._purges.submit(purge)
            return await asyncio.wrap_future(self._purging)
        except Exception as exc:  # a volume read-only or another uid's on this worker
            raise _prune_failed("prune_artifacts", exc) from None

    @activity.defn(name="prune_run_events")
    async def prune(self, data: SweepInput) -> int:
        """Run events past their retention, a batch at a time, at most PRUNE_BATCHES a run:
        one run (a minute) deletes up to 50,000, past the 4 million a day 50 calls/s make."""
        days = data.run_event_retention_days
        if days is None:
            return 0
        older_than = datetime.now(UTC) - timedelta(days=days)
        pruned = 0
        try:
            for _ in range(PRUNE_BATCHES):
                async with transaction(self._sessions) as session:
                    deleted = await prune_run_events(session, older_than, PRUNE_BATCH)
                pruned += deleted
                activity.heartbeat(pruned)
                if deleted < PRUNE_BATCH:
                    break
        except Exception as exc:  # a batch past the statement timeout, the store down
            raise _prune_failed("prune_run_events", exc) from None
        return pruned

    @activity.defn(name="sweep_open_receipts")
    async def sweep(self, data: SweepInput) -> SweepReport:
        now = datetime.now(UTC)
        cutoff = now - timedelta(seconds=data.shortest)
        report = SweepReport()
        # Page by page, past the receipts left to their workflows: the oldest open receipts
        # may all be live (long streams, closes retried through an outage), and one batch of
        # them hid every abandoned receipt behind it for as long as they ran.
        # A retry after a timeout goes on from the last page its attempt finished (heartbeat
        # details), not from the first: the same live receipts again, and the tail unreached.
        after = _resumed(activity.info().heartbeat_details)
        for _ in range(data.pages):
            async with self._sessions() as session:
                found = await receipts.open_before(session, cutoff, data.batch, after)
            report.found += len(found)
            mark = _mark(after)
            for tenant_id, invocation_id, started_at in found:
                activity.heartbeat(*mark)
                workflow = await self._workflow(tenant_id, str(invocation_id))
                if workflow is Workflow.RUNNING:
                    report.left_to_workflow += 1
                    continue
                if not to_sweep(workflow, (now - started_at).total_seconds(), data):
                    continue
                # Read before the close: read after it, a failed read would fail the attempt
                # with the receipt closed, and the retry would find nothing left to count.
                profile, provider = await self._series(tenant_id, invocation_id)
                if await self._statements.sweep(tenant_id, invocation_id, started_at):
                    report.closed += 1
                    metrics.receipts_swept.add(1, {"tenant": tenant_id})
                    # Only the close that was written counts: one that lost to the call's own
                    # close (counted by it) wrote nothing.
                    count_outcome(tenant_id, profile, provider, InvocationOutcome.FAILED)
            if len(found) < data.batch:
                break
            after = (found[-1][2], found[-1][1])
            activity.heartbeat(*_mark(after))
        return report

    async def _series(self, tenant_id: str, invocation_id: uuid.UUID) -> tuple[str, str]:
        """The profile and provider a swept receipt is counted under in `invocations`, as its
        call's close would have: the receipt's profile, its deployment's provider (`unknown`
        should that deployment row be gone)."""
        r, d = InvocationReceiptRow, ModelDeploymentRow
        its_deployment = (col(d.tenant_id) == col(r.tenant_id)) & (
            col(d.deployment_id) == col(r.deployment_id)
        )
        stmt = (
            sa.select(col(r.profile_id), col(d.provider))
            .outerjoin(d, its_deployment)
            .where(col(r.tenant_id) == tenant_id, col(r.invocation_id) == invocation_id)
        )
        async with self._sessions() as session:
            found = (await session.execute(stmt)).first()
        profile, provider = found if found is not None else (None, None)
        return profile or UNKNOWN, provider or UNKNOWN

    async def _workflow(self, tenant_id: str, invocation_id: str) -> Workflow:
        # The worker's client as it is now (core/temporal_rotation.py).
        handle = activity.client().get_workflow_handle(invoke_workflow_id(tenant_id, invocation_id))
        try:
            described = await handle.describe()
        except RPCError as exc:
            if exc.status is RPCStatusCode.NOT_FOUND:
                return Workflow.NEVER_STARTED
            raise
        if described.status is WorkflowExecutionStatus.RUNNING:
            return Workflow.RUNNING
        return Workflow.ENDED


def _mark(after: tuple[datetime, uuid.UUID] | None) -> tuple[str, ...]:
    return () if after is None else (after[0].isoformat(), str(after[1]))


def _resumed(details: Sequence[Any]) -> tuple[datetime, uuid.UUID] | None:
    if len(details) != 2:
        return None
    try:
        return datetime.fromisoformat(str(details[0])), uuid.UUID(str(details[1]))
    except ValueError:
        return None
