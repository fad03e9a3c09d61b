"""ReceiptReconciler: started by its schedule (hourly at :30 by default); settles receipts whose
usage is Unknown or Estimated from provider statements.

First every configured statement source is read into the store (each retried with exponential
backoff while it fails; a source that stays down is reported and the run goes on with the
statements already stored), then the lookback is reconciled one UTC day at a time. A day holds
whole statement buckets (1m, 1h or 1d, aligned), so a bucket's receipts are always shared out
together, and a day that keeps failing is reported in `failed_windows` while the days after it
are still reconciled. The settle delay holds back only bucket allocation (buckets ending after
now less the delay); a statement line naming a receipt's provider request id settles it at
once. The report says what was skipped and why. Everything is idempotent per receipt and
statement: a second run settles nothing new.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from activities.reconciliation_types import (
        SOURCE_REFUSED,
        FetchInput,
        FetchResult,
        GaugeInput,
        ReconciliationReport,
        WindowInput,
        WindowResult,
    )
    from domain.statements import WIDTHS, ReconcilerInput

_STORE = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30))
# A day that keeps failing must not hold back the days after it: retried up to ten attempts
# (1+2+4+8+16+30+30+30+30 s between them: a failing statement is through in about two and a
# half minutes, which outlasts a database restart) within 20 minutes in all (one that hangs
# each time), then reported in `failed_windows` and left to the next run. Retried for ever,
# one poison day stopped the whole run and, through the schedule's overlap policy, every later
# run at that day, until it left the lookback (seen when one day's request ids passed what one
# statement binds).
_WINDOW = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=10,
)
_WINDOW_IN_ALL = timedelta(minutes=20)
_DAY = timedelta(days=1)


def _floor(at: datetime, width: timedelta) -> datetime:
    step = int(width.total_seconds())
    seconds = int(at.timestamp())
    return datetime.fromtimestamp(seconds - seconds % step, UTC)


@workflow.defn(name="ReceiptReconciler")
class ReceiptReconcilerWorkflow:
    @workflow.run
    async def run(self, data: ReconcilerInput) -> ReconciliationReport:
        now = data.as_of or workflow.now()
        cutoff = now - timedelta(minutes=data.settle_delay_minutes)
        start = _floor(now - timedelta(hours=data.lookback_hours), _DAY)
        fetch_end = _floor(cutoff, WIDTHS[data.bucket_width])
        report = ReconciliationReport(cutoff=cutoff, until=now)

        sources: list[str] = await workflow.execute_activity(
            "reconcile_sources",
            result_type=list[str],
            start_to_close_timeout=timedelta(seconds=10),
            retry_policy=_STORE,
        )
        fetch_retry = RetryPolicy(
            initial_interval=timedelta(seconds=data.retry_initial_seconds),
            backoff_coefficient=2.0,
            maximum_interval=timedelta(seconds=data.retry_max_interval_seconds),
            non_retryable_error_types=[SOURCE_REFUSED],
        )

        async def fetch(source: str) -> None:
            try:
                got: FetchResult = await workflow.execute_activity(
                    "reconcile_fetch",
                    FetchInput(
                        source=source, start=start, end=fetch_end, bucket_width=data.bucket_width
                    ),
                    result_type=FetchResult,
                    start_to_close_timeout=timedelta(minutes=2),
                    schedule_to_close_timeout=timedelta(seconds=data.source_timeout_seconds),
                    retry_policy=fetch_retry,
                )
                report.sources[source] = got.lines
            except ActivityError as exc:
                cause = exc.cause
                report.failed_sources[source] = str(cause) if cause else str(exc)

        await asyncio.gather(*(fetch(s) for s in sources))

        # Receipts up to now: a request-id match is exact and settles a closed receipt at once;
        # the settle delay holds back only buckets that ended after the cutoff (bucket_cutoff).
        day = start
        while day < now:
            end = min(day + _DAY, now)
            try:
                got: WindowResult = await workflow.execute_activity(
                    "reconcile_window",
                    WindowInput(
                        start=day,
                        end=end,
                        bucket_cutoff=cutoff,
                        settle_zero_usage=data.settle_zero_usage,
                        tenant_ids=data.tenant_ids,
                    ),
                    result_type=WindowResult,
                    start_to_close_timeout=timedelta(minutes=10),
                    schedule_to_close_timeout=_WINDOW_IN_ALL,
                    retry_policy=_WINDOW,
                )
            except ActivityError as exc:
                if is_cancelled_exception(exc):
                    raise  # the run itself is being cancelled: not a failed day
                # The first line only: a database error goes on with the statement and its
                # parameters, tens of thousands of request ids on a large day.
                reason = next(iter(str(exc.cause or exc).splitlines()), "")[:300]
                report.failed_windows[day.date().isoformat()] = reason
                workflow.logger.warning("reconcile window %s failed: %s", day.date(), reason)
                day += _DAY
                continue
            report.pending += got.pending
            report.settled += got.settled
            report.by_request_id += got.by_request_id
            report.skipped += got.skipped
            report.unmatched += got.unmatched
            report.unattributed_input_tokens += got.unattributed_input_tokens
            report.unattributed_output_tokens += got.unattributed_output_tokens
            for reason, count in got.skipped_reasons.items():
                report.skipped_reasons[reason] = report.skipped_reasons.get(reason, 0) + count
            day += _DAY

        report.awaiting = await workflow.execute_activity(
            "reconcile_gauge",
            GaugeInput(
                failed_windows=len(report.failed_windows),
                failed_sources=sorted(report.failed_sources),
            ),
            result_type=dict[str, int],
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=_STORE,
        )
        return report
