"""A keyed request seen before: its receipt and stored answer, replayed.

A receipt already closed is replayed from the store alone, with no Temporal round trip, so a
retry is answered while Temporal is unreachable too (api.invocations asks `answered_before`
then, instead of refusing at once). A receipt still open is waited for: its workflow's result,
then a few reads of the receipt spaced out, then a 503 telling the caller when to come back.
A receipt open with no workflow at all, past the start's bound, is the sweeper's: the retry is
told at once to come back when the sweeper may have closed it (`domain.sweep.unstarted_wait`).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import AsyncIterator
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from activities.invoke_hub import ReceiptReady
from api.invocation_events import InvocationEvent, Replayed
from api.problems import Problem
from domain.close_reason import failed_before_output
from domain.enums import InvocationOutcome
from domain.failures import KEY_CLOSED
from domain.invocation import invocation_id, invoke_workflow_id
from domain.sweep import unstarted_wait
from store import receipts
from store.artifact_files import ArtifactFiles
from store.tables import InvocationReceiptRow

log = logging.getLogger("model_router.api")

# When a retry of a key whose receipt is still open is told to come back: it already waited
# for the workflow and 5 s for the receipt, so a short delay, as for a store outage.
NOT_FINISHED_RETRY_AFTER_SECONDS = 2
# The pauses before a retry's reads of a receipt still open once its workflow has ended (or
# Temporal did not answer, or the start may still be under way): its last read 5 s on, as the
# last of the 100 reads 50 ms apart these replaced, in 10 reads. A receipt left to the sweeper
# stays open for tens of seconds, and every retry of its key read it 20 times a second
# meanwhile (bench/bench_faults.py: up to 16 such keys after an API kill at c=16).
OPEN_RECEIPT_PAUSES = (0.0, 0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 0.45)
# How long a replay whose receipt closed without its file on disk yet waits for the workflow
# that writes it: a write is given up after store.artifact_files.WAIT_SECONDS.
FILED_WAIT_SECONDS = 5.0


class Replays:
    def __init__(
        self,
        client: Client,
        sessions: async_sessionmaker[AsyncSession],
        files: ArtifactFiles,
        start_wait_seconds: float,
    ) -> None:
        self._client = client
        self._sessions = sessions
        self._files = files
        self._start_wait = start_wait_seconds

    def rebind(self, client: Client) -> None:
        self._client = client

    async def seen(self, tenant: str, key: str) -> InvocationReceiptRow | None:
        async with self._sessions() as session:
            return await receipts.by_key(session, tenant, key)

    async def answered_before(self, tenant: str, key: str | None) -> InvocationReceiptRow | None:
        """While Temporal is known unreachable: the closed receipt of a caller's key, which a
        retry replays from the store alone (a client that timed out and retries during the
        outage gets the answer it paid for, not a 503). None for a new or still open key, or
        when the store does not answer either: the caller then gets the gate's 503."""
        if key is None:
            return None
        try:
            seen = await self.seen(tenant, key)
        except Exception as exc:
            log.warning("receipt read failed while Temporal is unreachable: %s", type(exc).__name__)
            return None
        return seen if seen is not None and seen.ended_at is not None else None

    async def events(
        self,
        tenant: str,
        key: str,
        hash_: str,
        seen: InvocationReceiptRow | None = None,
        *,
        with_output: bool = True,
    ) -> AsyncIterator[InvocationEvent]:
        """The key's stored answer, then its receipt: `seen` when it is closed already, else
        the receipt once it closes. Without `with_output`, no answer (a stream that had part of
        it live): the receipt ends it as an answer not given whole."""
        if seen is not None and seen.ended_at is not None:
            receipt, closed = seen, True
        else:
            receipt, closed = await self._wait_closed(tenant, key), False
        if receipt.request_hash != hash_:
            raise Problem(
                409,
                "This Idempotency-Key was used with a different request.",
                field="header.Idempotency-Key",
                # The type every other reuse of a key is refused with (api/invocations.py): a
                # key raced by two requests of different bodies was refused without one here.
                type_="https://model-router.dev/problems/idempotency-key-reused",
            )
        if (
            receipt.outcome is InvocationOutcome.DENIED
            or failed_before_output(receipt.outcome, receipt.close_reason)
            or _key_closed(receipt)
        ):
            # A budget's denial, or a call that failed before any output, replays as it was
            # answered: its status before any stream. Behind an empty "answer", a streamed
            # replay was a 200 ending in an error event. A call our side lost or its caller
            # left (KEY_CLOSED: caller-lost, swept, internal, cancelled) replays, stream or
            # not, as the 409 `invocation-closed` every surface gives it: as a stream, it was
            # a 200 of the partial output it stored, then an error event, where the same key
            # without `stream` was that 409. (A call that failed after its stream began, by the
            # provider's doing, replays as a stream, as it was answered.)
            yield ReceiptReady(receipts.summary_of(receipt))
            return
        if not with_output:
            yield Replayed(None, receipt.deployment_id)
            yield ReceiptReady(receipts.summary_of(receipt))
            return
        output = await self._stored(tenant, receipt.output_artifact_ref)
        if output is None and receipt.output_artifact_ref and closed:
            # Closed moments ago, its file may still be on its way: the call's task (and so
            # the workflow's result) ends only once the file is written or given up.
            await self._workflow_ended(tenant, key, FILED_WAIT_SECONDS)
            output = await self._stored(tenant, receipt.output_artifact_ref)
        yield Replayed(output, receipt.deployment_id)
        yield ReceiptReady(receipts.summary_of(receipt))

    async def _workflow_ended(self, tenant: str, key: str, bound: float | None = None) -> bool:
        """Until the key's workflow has ended, at most `bound` seconds, or Temporal gave up
        answering; False at once when it does not exist. The receipt, not the workflow's
        result, is what a replay serves: a failed workflow still closed it."""
        handle = self._client.get_workflow_handle(
            invoke_workflow_id(tenant, invocation_id(tenant, key))
        )
        try:
            await asyncio.wait_for(handle.result(), bound)
        except RPCError as err:
            return err.status is not RPCStatusCode.NOT_FOUND
        except Exception as exc:  # failed, timed out, terminated, or Temporal did not answer
            log.debug("replay's wait for the workflow ended: %s", type(exc).__name__)
        return True

    async def _stored(self, tenant: str, ref: str | None) -> bytes | None:
        """The stored answer a replay serves; none when the artifact volume does not answer in
        time (read off the event loop, store/artifact_files.py), as when retention removed it."""
        if not ref:
            return None
        try:
            return await self._files.get(tenant, ref)
        except OSError as exc:
            log.warning("stored answer not read, replayed without it: %s", type(exc).__name__)
            return None

    async def _wait_closed(self, tenant: str, key: str) -> InvocationReceiptRow:
        if not await self._workflow_ended(tenant, key):
            row = await self.seen(tenant, key)
            if row is not None and row.ended_at is not None:
                return row
            if row is not None:
                open_for = (datetime.now(UTC) - row.started_at).total_seconds()
                wait = unstarted_wait(open_for, self._start_wait)
                if wait is not None:  # the sweeper's: no read below would find it closed
                    raise _not_finished(max(NOT_FINISHED_RETRY_AFTER_SECONDS, math.ceil(wait)))
        for pause in OPEN_RECEIPT_PAUSES:
            await asyncio.sleep(pause)
            row = await self.seen(tenant, key)
            if row is not None and row.ended_at is not None:
                return row
        # Still open: its call under way elsewhere, or its process gone and the receipt left to
        # the sweeper (docs/runbook.md). Either way it will close; the caller is told when to
        # ask again rather than held.
        raise _not_finished(NOT_FINISHED_RETRY_AFTER_SECONDS)


def _key_closed(receipt: InvocationReceiptRow) -> bool:
    """Whether the receipt closed without its answer given whole, by our side or its caller's
    leaving: the key is spent, and api.wire answers it with a 409 `invocation-closed`."""
    return receipt.outcome is not InvocationOutcome.COMPLETED and receipt.close_reason in KEY_CLOSED


def _not_finished(retry_after: int) -> Problem:
    return Problem(
        503,
        "The invocation with this key has not finished; retry after the indicated delay.",
        type_="https://model-router.dev/problems/invocation-in-progress",
        headers={"Retry-After": str(retry_after)},
    )
