"""ReceiptSweeper: started by its schedule (every minute by default); closes receipts left open
past the invocation budget (Failed, usage Unknown). It bounds how long a receipt can stay open
when no poller is there to close it (the worker and the API both gone) or when the workflow that
owned it failed; see docs/runbook.md."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from domain.sweep import PruneArtifactsInput, SweepInput, SweepReport, artifact_slots


# Marks the histories where a run also deletes run events past their retention.
PRUNE_PATCH = "prune-run-events"
# Marks the histories where a run also deletes stored answers past their retention.
ARTIFACTS_PATCH = "prune-artifacts"
# The store or Temporal may be down: retried until the run's own timeout.
_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=15))


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
            report.events_pruned = await workflow.execute_activity(
                "prune_run_events",
                data,
                result_type=int,
                start_to_close_timeout=timedelta(minutes=5),
                heartbeat_timeout=timedelta(seconds=60),
                retry_policy=_RETRY,
            )
        days = data.artifact_retention_days
        if days is not None and workflow.patched(ARTIFACTS_PATCH):
            minute = int(workflow.now().timestamp() // 60)
            report.artifacts_pruned = await workflow.execute_activity(
                "prune_artifacts",
                PruneArtifactsInput(
                    retention_days=days, slots=artifact_slots(minute, data.period_minutes)
                ),
                result_type=int,
                start_to_close_timeout=timedelta(minutes=5),
                retry_policy=_RETRY,
            )
        return report
