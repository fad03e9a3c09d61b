"""A call's receipt closed as the call ends, and its answer handed to the caller.

The call's own task (`InvokeActivities.begin`) closes the receipt here as soon as the call has
ended, its answer's file written beside the close, and hands the answer over once Temporal has
answered the workflow's start, or at once while this process's answers ahead of their starts are
fewer than the lead allows (answers_ahead.py). A close the store refused goes back to the
workflow (FINALIZE), which retries it until the store answers; when the start failed too, no
workflow exists to do that, and `close_late` keeps the paid call's claim. Every close is written
by `write_close`: one the store refused for its values rather than for being away is written
once more without what the provider reported.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from activities.answers_ahead import AnswersAhead
from activities.invoke_hub import PendingCall, ReceiptReady
from activities.invoke_outcomes import count_invocation
from domain.invocation import Disposition, InvocationInput, InvocationSummary
from domain.provider_reports import without_reports
from store.artifact_files import ArtifactFiles
from store.outage import is_outage
from store.receipt_statements import ReceiptStatements

log = logging.getLogger("model_router.invoke")


async def write_close(
    write: Callable[[InvocationSummary], Awaitable[object]], summary: InvocationSummary
) -> InvocationSummary:
    """Write a receipt's close and return the summary written: as given, or, when the store
    refused it for its values rather than for being away (store/outage.py), without what the
    provider reported (domain/provider_reports.without_reports). Refused as it was, the close
    failed on every retry: the receipt stayed open and its caller waited on it, as a count or
    an id past its column did until each got a rule of its own (tests/test_close_refused.py).
    An outage, or a close refused even so, is raised: the workflow retries it."""
    try:
        await write(summary)
        return summary
    except Exception as exc:
        if is_outage(exc):
            raise
        log.error(
            "receipt close refused for its values (%s), written without the provider's figures",
            type(exc).__name__,
        )
    bare = without_reports(summary)
    await write(bare)
    return bare


class ReceiptCloser:
    def __init__(
        self, statements: ReceiptStatements, files: ArtifactFiles, ahead: AnswersAhead
    ) -> None:
        self._statements = statements
        self._files = files
        self._ahead = ahead

    async def close(
        self,
        data: InvocationInput,
        pending: PendingCall,
        summary: InvocationSummary,
        output: bytes | None,
    ) -> InvocationSummary:
        """Close the receipt of a call that ended, store its answer, and hand the answer to
        the caller: the summary, or FINALIZE when the store refused the close."""
        # The close does not wait for the workflow's start (a call begun alongside it): the
        # call happened, so its receipt is written whatever becomes of the start, and a start
        # that then fails leaves a closed receipt the key replays, not a billable call recorded
        # nowhere. Only the answer waits for the start, below.
        won: list[bool] = []  # what the close found: False, a receipt closed by another
        closing = asyncio.ensure_future(write_close(self._finalize(data, won), summary))
        filing: asyncio.Future[None] | None = None
        if output is not None and summary.output_artifact_ref is not None:
            # The answer's file is written on a thread of the artifact pool, beside the close
            # and the answer: the call's task returns (and so the workflow's result, which a
            # replay of the key waits for, comes) only once it is written or given up. On the
            # loop the write took 0.15-1.3 ms of a c=1 call's path on this machine's disk
            # (timeline of bench calls, 2026-12-01), and a stalled volume held every call of the
            # process; awaited before the answer, its thread's hand-over cost 0.5 ms at c=1
            # (bench/invoke_pair.py, 600 pairs, twice). The receipt names the file by its hash,
            # known before it is written.
            filing = asyncio.ensure_future(
                self._store_output(data.tenant_id, summary.output_artifact_ref, output)
            )
        try:
            try:
                summary = await closing
            except Exception as exc:
                log.warning(
                    "receipt finalize failed, handed to the workflow: %s", type(exc).__name__
                )
                return summary.durable().model_copy(update={"disposition": Disposition.FINALIZE})
            # Counted by whoever wrote the close, once (record_metrics): a receipt the
            # workflow's abandoned close wrote first was counted there (the sweeper's, in
            # receipts_swept); counted here too, `invocations` had it twice.
            ours = not won or won[-1]
            if not ours:
                summary = await self._as_stored(data, summary)
            # A start refused now finds the receipt closed, and the caller has the answer the
            # receipt records either way: the wait for the start decides nothing but the pace.
            # The answer goes at once within the process's lead over its starts, else once
            # Temporal has answered this one (its backpressure, answers_ahead.py).
            if not self._ahead.take(pending.started):
                await pending.start_resolved()
            self._hand_over(data, pending, summary, counted=ours)
            return summary.durable()  # the activity's result: the workflow's history
        finally:
            if filing is not None:
                await asyncio.shield(filing)  # never raises: a failed write is logged

    async def close_late(self, data: InvocationInput, pending: PendingCall) -> bool:
        """For a call begun alongside a start that then failed: whether it ended with its close
        refused (FINALIZE), so that its claim must not be undone. The provider answered and was
        paid; undone, the key's retry would call it again. No workflow exists to retry the
        close, so it is tried once more here: written, the caller gets the answer the receipt
        records (as when the close had gone through at once); refused again, the claim stays
        open and the sweeper closes it once the invocation's budget has passed (Failed, usage
        Unknown), the key answering no second call meanwhile."""
        work = pending.work
        if work is None or not work.done() or work.cancelled() or work.exception() is not None:
            return False
        owed: InvocationSummary = work.result()
        if owed.disposition is not Disposition.FINALIZE:
            return False
        summary = owed.model_copy(update={"disposition": Disposition.DONE})
        try:
            summary = await write_close(self._finalize(data), summary)
        except Exception as exc:
            log.warning("late receipt close failed, left to the sweeper: %s", type(exc).__name__)
            return True
        self._hand_over(data, pending, summary)
        return True

    async def _as_stored(
        self, data: InvocationInput, summary: InvocationSummary
    ) -> InvocationSummary:
        """The receipt as stored, when the call's own close found it closed by another: the
        workflow's close of a call it took for lost (its caller queue unpolled, its heartbeat
        missed) or the sweeper's. The caller is told what the receipt says, never the answer
        beside a receipt that says Failed; a stream's output already sent ends with that
        failure. The stored close is final: the first close wins."""
        try:
            stored = await self._statements.closed_as(data.tenant_id, data.invocation_id)
        except Exception as exc:
            log.warning("closed receipt unreadable, caller told its close: %s", type(exc).__name__)
            return summary
        if stored is None:
            return summary
        log.warning("receipt closed by another before its call ended: %s", stored.close_reason)
        return stored

    def _finalize(
        self, data: InvocationInput, won: list[bool] | None = None
    ) -> Callable[[InvocationSummary], Awaitable[bool]]:
        """The receipt's close, each result (False: closed by another first) kept in `won`."""

        async def finalize(summary: InvocationSummary) -> bool:
            closed = await self._statements.finalize(data, summary)
            if won is not None:
                won.append(closed)
            return closed

        return finalize

    @staticmethod
    def _hand_over(
        data: InvocationInput,
        pending: PendingCall,
        summary: InvocationSummary,
        counted: bool = True,
    ) -> None:
        """The receipt is durable: its caller's answer can end. `counted`: this close wrote the
        receipt, so the invocation is counted here (False: another close wrote and counted it)."""
        pending.answered = True
        pending.events.put_nowait(ReceiptReady(summary))
        if counted:
            count_invocation(data, summary)

    async def _store_output(self, tenant_id: str, ref: str, output: bytes) -> None:
        """The stored answer a replay of this key serves. A write that fails (a full, broken or
        stalled artifact volume) does not fail the call the provider answered: the caller gets
        its answer, the receipt keeps the reference, and a replay of the key finds no stored
        answer, as once the tenant's retention has removed it."""
        try:
            await self._files.write(tenant_id, ref, output)
        except Exception as exc:
            log.error("output artifact not written, replays get no answer: %s", type(exc).__name__)
