"""ReceiptSweeper: started by its schedule (every minute by default); closes receipts left open
past the invocation budget (Failed, usage Unknown). It bounds how long a receipt can stay open
when no poller is there to close it (the worker and the API both gone) or when the workflow that
owned it failed; see docs/runbook.md. Then it prunes what is past its retention (run events,
stored answers): housekeeping, given a few attempts and then left to the next run."""

from __future__ import annotations

from datetime import timedelta

from temporalio import exceptions, workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from pydantic import BaseModel

    from domain.sweep import PruneArtifactsInput, SweepInput, SweepReport, artifact_slots


# Marks the histories where a run also deletes run events past their retention.
PRUNE_PATCH = "prune-run-events"
# Marks the histories where a run also deletes stored answers past their retention.
ARTIFACTS_PATCH = "prune-artifacts"
# Marks the histories where a prune gets a few attempts and its failure is reported, not
# retried until the run's timeout.
PRUNE_FAILURES_PATCH = "prune-failures-reported"
# The store or Temporal may be down: retried until the run's own timeout.
_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=15))
# A prune is housekeeping the next run does as well. One failing the same way every time (the
# artifact volume read-only on this worker, a batch past the statement timeout) held the run to
# its 10 minute timeout, and under the schedule's SKIP overlap the sweeps of the nine ticks
# between were dropped: receipts were swept every ten minutes instead of every minute.
_PRUNE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=15),
    maximum_attempts=3,
)


def _failure(error: ActivityError) -> str:
    """What failed, by type: an activity's message may carry what its error said."""
    cause = error.cause
    if isinstance(cause, ApplicationError):
        return cause.type or "ApplicationError"
    if isinstance(cause, exceptions.TimeoutError):
        return f"TimeoutError ({cause.type.name})" if cause.type else "TimeoutError"
    return type(cause).__name__ if cause is not None else type(error).__name__


async def _prune(
    report: SweepReport, step: str, data: BaseModel, heartbeat: timedelta | None
) -> int:
    """What the prune `step` deleted; 0, and the failure named in the report, once its
    attempts are spent."""
    if not workflow.patched(PRUNE_FAILURES_PATCH):
        # Histories from before: retried until the run's timeout.
        return await workflow.execute_activity(
            step,
            data,
            result_type=int,
            start_to_close_timeout=timedelta(minutes=5),
            heartbeat_timeout=heartbeat,
            retry_policy=_RETRY,
        )
    try:
        return await workflow.execute_activity(
            step,
            data,
            result_type=int,
            start_to_close_timeout=timedelta(minutes=5),
            heartbeat_timeout=heartbeat,
            retry_policy=_PRUNE_RETRY,
        )
    except ActivityError as exc:
        failure = f"{step}: {_failure(exc)}"
        workflow.logger.warning("prune failed, left to the next run: %s", failure)
        report.prune_failures.append(failure)
        return 0


@workflow.defn(name="ReceiptSweeper")
class ReceiptSweeperWorkflow:
    @workflow.run
    async def run(self, data: SweepInput) -> SweepReport:
        report: SweepReport = await workflow.execute_activity(
            "sweep_open_receipts",
            data,
            result_type=SweepReport,
            start_to_close_timeout=timedelta(minutes=5),
            heartbeat_timeout=timedelta(seconds=60),
            retry_policy=_RETRY,
        )
        if data.run_event_retention_days is not None and workflow.patched(PRUNE_PATCH):
            report.events_pruned = await _prune(
                report, "prune_run_events", data, timedelta(seconds=60)
            )
        days = data.artifact_retention_days
        if days is not None and workflow.patched(ARTIFACTS_PATCH):
            minute = int(workflow.now().timestamp() // 60)
            slots = artifact_slots(minute, data.period_minutes)
            report.artifacts_pruned = await _prune(
                report,
                "prune_artifacts",
                PruneArtifactsInput(retention_days=days, slots=slots),
                None,
            )
        return report
