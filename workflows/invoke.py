"""InvokeModel: one invocation, durable. The provider call runs where the caller's HTTP request
lives; whatever happens to that process, the workflow closes the receipt.

1. The API process claims the receipt, starts this workflow eagerly and begins the provider call
   at once, alongside it. The workflow's first task runs there, and its local activity adopts
   the call in flight (from the in-memory hub), awaits its outcome and finalises the receipt:
   no extra round trip, tokens stream to the response in memory, none of them in history.
2. If that local activity ran somewhere without the request (the workflow task was not eager,
   or it is being replayed after the API process died), it reports NOT_HERE without touching
   anything, and the activity goes to the caller's own task queue instead.
3. If the caller's process is gone (the activity is never picked up, or stops heartbeating), or
   the invocation was claimed by an earlier execution, the receipt is closed on the shared
   queue: Failed, usage Unknown. A claim the API made (`claimed_at`) is closed only if it is
   still that claim, and nothing is claimed: one the API undid stays undone, a retry's claim
   is the retry's. The provider is never called twice: the claim is a unique row.
4. If the call ended but its receipt could not be written (the database was unreachable), the
   workflow writes it from the summary, retried until the store answers (on the standalone
   worker, which reaches the store on connections of its own), and answers with what it wrote
   (without the provider's figures, if the store refused those). If the claim itself could not
   be written, nothing was claimed or called, and there is nothing to close.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError

with workflow.unsafe.imports_passed_through():
    from domain.invocation import (
        INVOKE_WORKFLOW,
        Disposition,
        FinalizeInput,
        InvocationInput,
        InvocationSummary,
        closer_queue,
        provider_of,
    )

ONCE = RetryPolicy(maximum_attempts=1)
# Closing a receipt is retried until the store answers: an outage of any length ends with the
# receipt closed. Unlimited attempts, at most every 10 s.
UNTIL_STORED = RetryPolicy(
    initial_interval=timedelta(milliseconds=500),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=10),
)
# A failed call_provider, however it is reported (a local activity's failure can arrive as an
# ApplicationError as well as an ActivityError): the receipt is closed on the shared queue.
_FAILED = (ActivityError, ApplicationError)
# Marks the histories where a cancelled local activity's call was adopted on the caller queue.
READOPT_PATCH = "readopt-let-go-call"
# Marks the histories whose refused close is retried on the standalone worker's queue first.
CLOSE_APART_PATCH = "finalize-on-standalone-queue"


async def _finalize(data: InvocationInput, closing: FinalizeInput) -> InvocationSummary | None:
    """The close the caller's process could not write, retried until the store answers: on the
    closers queue first, which no API process polls (that process's store had just failed it;
    on the shared queue its own worker took the first attempt, eagerly, and most retries), and
    on the shared queue when no standalone worker takes it within 10 s or it still fails there
    after a minute (the standalone workers cut off from the store while API processes reach
    it)."""
    if workflow.patched(CLOSE_APART_PATCH):
        try:
            return await workflow.execute_activity(
                "finalize_receipt",
                closing,
                result_type=InvocationSummary,
                task_queue=closer_queue(workflow.info().task_queue),
                schedule_to_start_timeout=timedelta(seconds=10),
                start_to_close_timeout=timedelta(seconds=30),
                schedule_to_close_timeout=timedelta(seconds=60),
                retry_policy=UNTIL_STORED,
            )
        except ActivityError as failure:
            if isinstance(failure.cause, CancelledError):
                raise
    return await workflow.execute_activity(
        "finalize_receipt",
        closing,
        result_type=InvocationSummary,
        start_to_close_timeout=timedelta(seconds=30),
        retry_policy=UNTIL_STORED,
    )


def _let_go(failure: BaseException) -> bool:
    """The local activity was cancelled while this workflow was not asked to be (a cancel
    request reaches the awaiting workflow as the activity's cancellation, too)."""
    cancelled = isinstance(failure, CancelledError) or (
        isinstance(failure, ActivityError) and isinstance(failure.cause, CancelledError)
    )
    return cancelled and workflow.cancellation_reason() is None


@workflow.defn(name=INVOKE_WORKFLOW)
class InvokeModelWorkflow:
    @workflow.run
    async def run(self, data: InvocationInput) -> InvocationSummary:
        budget = timedelta(seconds=data.timeout_seconds + 10)
        summary: InvocationSummary | None = None
        try:
            summary = await workflow.execute_local_activity(
                "call_provider",
                data,
                result_type=InvocationSummary,
                start_to_close_timeout=budget,
                retry_policy=ONCE,
            )
        except (*_FAILED, CancelledError) as failure:
            # Cancelled while this workflow was not: the SDK evicted the run as the activity
            # ran, and the call, let go of, waits in its process's hub
            # (activities/invoke_cancel.py). A next execution that found the activity still
            # finishing is handed its cancellation: the call is adopted on its caller queue, not
            # closed as abandoned beside its answer. This workflow's own cancellation goes on.
            if _let_go(failure) and workflow.patched(READOPT_PATCH):
                summary = InvocationSummary(
                    invocation_id=data.invocation_id, disposition=Disposition.NOT_HERE
                )
            elif isinstance(failure, CancelledError):
                raise
            else:
                summary = None
        if summary is not None and summary.disposition is Disposition.NOT_HERE:
            try:
                summary = await workflow.execute_activity(
                    "call_provider",
                    data,
                    result_type=InvocationSummary,
                    task_queue=data.caller_queue,
                    # Nobody polls a dead process's queue: notice quickly and close up.
                    schedule_to_start_timeout=timedelta(seconds=10),
                    start_to_close_timeout=budget,
                    heartbeat_timeout=timedelta(seconds=15),
                    retry_policy=ONCE,
                )
            except _FAILED:
                summary = None
        if summary is not None and summary.disposition is Disposition.NOT_CLAIMED:
            return summary
        if summary is not None and summary.disposition is Disposition.FINALIZE:
            written = await _finalize(
                data,
                FinalizeInput(
                    tenant_id=data.tenant_id,
                    summary=summary,
                    profile_id=data.profile_id,
                    provider=provider_of(data, summary.deployment_id),
                ),
            )
            # What the close wrote (without the provider's figures, if the store refused them);
            # None in a history from before the activity returned it.
            closed = written if written is not None else summary
            return closed.model_copy(update={"disposition": Disposition.DONE})
        if summary is None or summary.disposition is not Disposition.DONE:
            summary = await workflow.execute_activity(
                "close_abandoned_receipt",
                data,
                result_type=InvocationSummary,
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=UNTIL_STORED,
            )
        return summary
