"""The in-memory meeting point of an HTTP request and its provider call, inside one API
process. The request (content) and the stream of events (content) pass only through here —
never through Temporal or the database. The provider call itself (a task) is held here from the
moment the API begins it until the workflow's activity adopts it."""

from __future__ import annotations

import asyncio
import secrets
import uuid
from dataclasses import dataclass, field
from typing import Any

from activities.stream_watchdog import StreamWatchdog
from domain.enums import InvocationOutcome
from domain.invocation import Disposition, InvocationSummary
from providers.types import (
    EmbeddingResult,
    Finish,
    KeepAlive,
    RerankResult,
    TextDelta,
    ToolCallDelta,
    UsageEvent,
)

# How long a call whose close is owed stays adoptable once its activity returned: the run's next
# execution comes within seconds of its workflow task timing out (10 s after it began).
OWED_CLOSE_KEEP_SECONDS = 60.0
# The loop turns a call's task gives the caller's response to send the first output: the
# handler's return, the response's start and its first chunk take three here.
HAND_OVER_TURNS = 8


@dataclass
class PendingCall:
    request: Any  # providers.types.ChatRequest, or the inputs of an embed / rerank
    events: asyncio.Queue[HubEvent] = field(default_factory=asyncio.Queue)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    claimed: bool = False
    invocation_id: uuid.UUID | None = None
    # The deployment of the attempt now putting events on the queue: set before its first
    # event, so whoever reads an output event knows who produced it.
    answering: str | None = None
    # The API process claims the receipt and begins the provider call itself, at once; the
    # workflow's activity then adopts that call (`work`) once `begun` is set. When False the
    # activity claims and begins it (a request opened without the API's claim).
    caller_claims: bool = False
    begun: asyncio.Event = field(default_factory=asyncio.Event)
    work: asyncio.Task[Any] | None = None
    # The caller's response is over (its last byte sent, or the caller gone). The activity
    # reports the call's end only then, so that the workflow's completion runs after it.
    delivered: asyncio.Event = field(default_factory=asyncio.Event)
    # The caller's response has sent the call's first output (set by api/wire.relay).
    first_sent: asyncio.Event = field(default_factory=asyncio.Event)
    # Resolved once the outcome of the call the API began is known (its task ended) or no call
    # will run here: the workflow's first activation waits for it (invoke_setup.HOLD_SECONDS).
    settled: asyncio.Future[None] | None = None
    # For a call begun alongside its workflow's start: True once the server accepted the start,
    # False if it could not be started (a call still running is cancelled and its claim undone;
    # one that had ended keeps its closed receipt).
    started: asyncio.Future[bool] | None = None
    # The call's answer, its receipt closed, went on the queue (ReceiptReady).
    answered: bool = False
    # Its adopting activity let go of it (the SDK evicted the run): back in the hub for the
    # run's next execution, and kept there by the hub alone (InvocationHub.let_go).
    let_go: bool = False
    # Its activity returned with its close owed (the store refused it), and a next execution of
    # its run may claim it again (InvocationHub.release).
    owed: bool = False
    # The activities awaiting the call: one, or two while a run's next execution shares it
    # with the stale activity its evicted run left (InvocationHub.share).
    adopters: int = 0

    def settle(self) -> None:
        if self.settled is not None and not self.settled.done():
            self.settled.set_result(None)

    async def start_resolved(self) -> None:
        """Until the server has answered this call's start (at once when the call began after
        it): the call's answer is handed over only then."""
        if self.started is not None:
            await asyncio.shield(self.started)

    def stopped_by_failed_start(self, outcome: InvocationOutcome | None) -> bool:
        """Whether the call was cancelled because its workflow could not be started: then its
        claim is undone (the key stays unused) instead of closed."""
        return (
            outcome is InvocationOutcome.CANCELLED
            and self.started is not None
            and self.started.done()
            and not self.started.result()
        )

    async def hand_over(self) -> None:
        """After the call's first output: a few loop turns for the caller's response to send
        it before the rest of a burst is relayed. A burst already read (the provider sent many
        chunks at once) is relayed without the call's task ever suspending, and the response's
        first chunk, a few steps of the handler away, waited for all of it (~0.5 ms of TTFT at
        c=1 on the simulator's burst, timeline of bench calls, 2026-12-01). Bounded: a caller
        slow to send, or gone, is not waited for."""
        for _ in range(HAND_OVER_TURNS):
            if self.first_sent.is_set():
                return
            await asyncio.sleep(0)  # one loop turn, not a wait for time

    async def next(self, quiet: StreamWatchdog, bound: float) -> HubEvent | None:
        """The call's next event, or None once the queue has been quiet for `bound` seconds.
        Taken straight off the queue when it is there (a held answer arrives whole), else
        awaited under the caller's one watchdog: a task and a timed wait per event cost 7.0 µs
        an event on a full queue against 0.1, and 7.8 against 3.1 one at a time (uvloop, timed
        alone)."""
        try:
            return self.events.get_nowait()
        except asyncio.QueueEmpty:
            pass
        quiet.waiting(bound)
        try:
            return await self.events.get()
        except asyncio.CancelledError:
            if quiet.expired():
                return None
            raise
        finally:
            quiet.idle()


class InvocationHub:
    def __init__(self) -> None:
        self._calls: dict[str, PendingCall] = {}
        # The calls the API began, by invocation, until their activity adopts them.
        self._begun: dict[uuid.UUID, PendingCall] = {}
        # The calls an activity has adopted, by token, until the last one awaiting it returns.
        self._held: dict[str, PendingCall] = {}
        # Set as the process stops its workers: a call whose activity is cancelled then stops
        # with it (activities/invoke.py), rather than being kept for an execution to come.
        self.stopping = False

    def open(
        self, request: Any, *, caller_claims: bool = False, invocation_id: uuid.UUID | None = None
    ) -> tuple[str, PendingCall]:
        token = secrets.token_urlsafe(16)
        call = PendingCall(request=request, caller_claims=caller_claims)
        self._calls[token] = call
        if caller_claims and invocation_id is not None:
            call.settled = asyncio.get_running_loop().create_future()
            self._begun[invocation_id] = call
            call.invocation_id = invocation_id
        return token, call

    def holding(self, invocation_id: uuid.UUID) -> asyncio.Future[None] | None:
        """What the invocation's first workflow activation may wait for: the outcome of the call
        this process began for it (None when there is no such call, or it has settled)."""
        call = self._begun.get(invocation_id)
        if call is None or call.settled is None or call.settled.done():
            return None
        return call.settled

    def claim(self, token: str) -> PendingCall | None:
        """The call for this token, once: a second execution finds nothing to run. The entry
        leaves the waiting calls with it (the activity holds it from then on)."""
        call = self._calls.pop(token, None)
        if call is None or (call.claimed and not call.owed):
            return None
        call.claimed = True
        call.owed = False
        call.let_go = False
        call.adopters = 1
        self._held[token] = call
        self._forget(call)
        return call

    def share(self, token: str) -> PendingCall | None:
        """The call an activity of an earlier execution still holds, for the run's next one.
        When Temporal times a workflow task out (its process starved under load, the task's
        heartbeat late), the server hands the run to a next execution at once, while the
        process holding the call learns of the eviction only as its own late reply is refused
        — and then asks Temporal whether the workflow was cancelled, for up to 2.5 s. A next
        execution arriving meanwhile found nothing here and reported NOT_HERE, and the workflow
        closed the receipt Failed `caller-lost` beside the answer the call went on to give (seen
        in CI). It now awaits the same call: both activities get its one outcome, and the stale
        one, once cancelled, leaves the call to it (invoke_cancel.py). Only a call the API
        claimed is shared: its claim and its task are the API's, not the activity's."""
        call = self._held.get(token)
        if call is None or not call.caller_claims:
            return None
        call.adopters += 1
        return call

    def shared(self, call: PendingCall) -> bool:
        """Whether another activity besides the one asking awaits this call."""
        return call.adopters > 1

    def release(self, token: str, call: PendingCall) -> None:
        """An activity awaiting the call returned: the last one out takes it off the hub. A
        call whose close is still owed (the store refused it: FINALIZE) stays adoptable for
        OWED_CLOSE_KEEP_SECONDS. Its activity's result may never reach the workflow (its task
        timed out under load as the call ended), and the run's next execution must get the
        close to write: finding nothing, it closed the receipt Failed `caller-lost` once the
        store answered, beside the answer its caller had."""
        if self._held.get(token) is not call:
            return  # let go of since, or never held
        call.adopters -= 1
        if call.adopters > 0:
            return
        del self._held[token]
        if _owes_close(call):
            # Still `claimed` (the caller's response reads that as adopted): `owed` lets a
            # next execution claim it again. Gone once the caller has the workflow's answer.
            call.owed = True
            self._calls[token] = call
            self.close_later(token, OWED_CLOSE_KEEP_SECONDS)

    def let_go(self, token: str, call: PendingCall, keep_seconds: float) -> None:
        """Give back a call whose adopting activity let go of it (its run evicted, the call left
        running): the run's next execution adopts it again. Kept until `keep_seconds` after the
        call ended, long enough for Temporal to come back and that execution to run; one that
        comes later finds nothing and closes nothing, the call's task having closed its receipt.
        Output its caller left unread goes with the entry."""
        call.claimed = False
        call.let_go = True
        call.adopters = 0
        self._held.pop(token, None)
        self._calls[token] = call
        work = call.work
        if work is None:
            self.close_later(token, keep_seconds)
        else:
            work.add_done_callback(lambda _: self.close_later(token, keep_seconds))

    def let_go_calls(self) -> list[PendingCall]:
        """The calls let go of that are waiting here and still running."""
        return [
            call
            for call in self._calls.values()
            if call.let_go and call.work is not None and not call.work.done()
        ]

    def close(self, token: str) -> None:
        call = self._calls.pop(token, None)
        if call is not None:
            self._forget(call)

    def _forget(self, call: PendingCall) -> None:
        if call.invocation_id is not None:
            self._begun.pop(call.invocation_id, None)

    def close_later(self, token: str, seconds: float) -> None:
        asyncio.get_running_loop().call_later(seconds, self.close, token)

    def __len__(self) -> int:
        """Calls whose content (the request) is still held here. A call that ended drops its
        request at once; its entry may wait a moment longer for the activity to adopt it."""
        return sum(1 for call in self._calls.values() if call.request is not None)


def _owes_close(call: PendingCall) -> bool:
    """Whether the call ended with its close left to the workflow (the store refused it)."""
    work = call.work
    if work is None or not work.done() or work.cancelled() or work.exception() is not None:
        return False
    summary = work.result()
    return isinstance(summary, InvocationSummary) and summary.disposition is Disposition.FINALIZE


@dataclass(frozen=True)
class ReceiptReady:
    """The last item a call puts on its queue: the receipt is durable by the time it arrives."""

    summary: InvocationSummary


@dataclass(frozen=True)
class NotStarted:
    """The workflow of a call begun alongside its start could not be started: the call was
    cancelled and its claim undone, so no receipt is kept (`summary` says so for a caller
    whose stream is already under way)."""

    summary: InvocationSummary


@dataclass(frozen=True)
class Attach:
    """This call's execution found the invocation claimed elsewhere: wait for that one."""


# A chat answer's output as the adapter streams it (its `Accepted` stays with the call), and
# the provider's keep-alives once output has started.
Output = TextDelta | ToolCallDelta | UsageEvent | Finish | KeepAlive
# Everything a call puts on its queue: the chat output, an embed's or rerank's one result,
# then the receipt — or, when another execution owns the key, `Attach`, or `NotStarted`.
HubEvent = Output | EmbeddingResult | RerankResult | ReceiptReady | Attach | NotStarted
