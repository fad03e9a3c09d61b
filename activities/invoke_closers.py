"""The receipt closes the InvokeModel workflow runs itself (workflows/invoke.py): the close a
call's own process could not write (`finalize_receipt`, retried until the store answers, on the
standalone workers' closers queue first), and the close of a call whose process is gone or never
ran it (`close_abandoned_receipt`). Neither touches a provider: a worker that runs only these
needs the receipt statements alone."""

from __future__ import annotations

from temporalio import activity

from activities.invoke_close import write_close
from activities.invoke_outcomes import count_invocation, record_metrics
from domain.enums import InvocationOutcome, UsageStatus
from domain.invocation import Disposition, FinalizeInput, InvocationInput, InvocationSummary
from store.receipt_statements import ReceiptStatements


class WorkflowCloses:
    def __init__(self, statements: ReceiptStatements) -> None:
        self._statements = statements

    @activity.defn(name="finalize_receipt")
    async def finalize_receipt(self, data: FinalizeInput) -> InvocationSummary:
        """The close `call_provider` could not write: retried by the workflow until the store
        answers. The first close wins, so a retry after a lost reply changes nothing. Returns
        the summary written (`write_close`: without the provider's figures when the store
        refused them), which the workflow answers with."""
        closed: list[bool] = []

        async def close(summary: InvocationSummary) -> None:
            closed.append(await self._statements.close(data.tenant_id, summary))

        written = await write_close(close, data.summary)
        # Counted by the close that wrote it: a retry after a lost reply finds it closed.
        if closed and closed[-1] and data.profile_id is not None and data.provider is not None:
            record_metrics(data.tenant_id, data.profile_id, data.provider, written)
        return written

    @activity.defn(name="close_abandoned_receipt")
    async def close_abandoned(self, data: InvocationInput) -> InvocationSummary:
        """The process that held the call is gone (or never ran it). A claimed receipt is closed
        Failed with usage Unknown: the provider may have done billable work. An unclaimed one
        means the provider was never called; its receipt says so with an estimate of zero.

        A claim the API made before starting this workflow (`claimed_at`) is closed only if it
        is still that claim, and nothing is claimed here. The API undoes its claim when it gives
        up on a start that Temporal then took after all (its reply late past the bound): this
        workflow runs on, finds no call anywhere, and claiming here spent a key its caller had
        been told was unused (the retry was a 409), or closed the retry's own claim Failed
        beside the answer the retry got (tests/test_fault_temporal_late_start.py)."""
        summary = InvocationSummary(
            invocation_id=data.invocation_id,
            outcome=InvocationOutcome.FAILED,
            usage_status=UsageStatus.UNKNOWN,
            deployment_id=data.targets[0].deployment_id,
            error_kind="caller-lost",
        )
        if data.claimed_at is not None:
            if await self._statements.close_claim(data.tenant_id, data.claimed_at, summary):
                count_invocation(data, summary)
                return summary
            # Nothing of this execution's is open: closed by its call, or undone by the API.
            return summary.model_copy(update={"disposition": Disposition.NOT_CLAIMED})
        if await self._statements.claim(data, data.targets[0].deployment_id):
            summary.usage_status = UsageStatus.ESTIMATED
            summary.input_tokens = summary.output_tokens = 0
        if await self._statements.finalize(data, summary):
            count_invocation(data, summary)
        return summary
