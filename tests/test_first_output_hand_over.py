"""A provider's burst (many chunks read at once) is relayed only after the caller's response
had a few loop turns to send the first output (PendingCall.hand_over): the call's task waits
for the response's first chunk, at most HAND_OVER_TURNS turns (a response that never sends is
not waited for), instead of relaying the whole burst ahead of it. Through the real OpenAI
adapter against the local upstream, whose echo of a long prompt arrives as one burst."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from activities.invoke_attempts import attempt_once
from activities.invoke_hub import InvocationHub, PendingCall, ReceiptReady
from activities.invoke_outcomes import Route
from api.invocation_events import InvocationEvent, Running
from api.openai_stream import ChatChunks
from api.wire import relay
from domain.enums import InvocationOutcome
from domain.invocation import AttemptTimeouts
from providers.registry import build_adapter
from providers.secrets import UpstreamSecretBroker
from providers.types import ChatRequest, Message, ProviderTimeouts, TextDelta, ToolCallDelta
from providers.upstream import UpstreamServer
from tests.helpers.invocations import completed, invocation_input

LONG = ChatRequest(messages=(Message(role="user", content=" ".join(["word"] * 300)),))
RESPONSE_SETUP_TURNS = 3  # what the handler's return and the response's start take here


async def _respond(pending: PendingCall, setup: int | None) -> int:
    """The caller's response, reduced to its steps: the first output, `setup` loop turns to
    start the response, then its first chunk sent (never, for None). Returns what was queued
    behind the first output by then."""
    first = await pending.events.get()
    while not isinstance(first, TextDelta | ToolCallDelta):
        first = await pending.events.get()
    for _ in range(setup or 0):
        await asyncio.sleep(0)  # loop turns, not time
    queued = pending.events.qsize()
    if setup is not None:
        pending.first_sent.set()
    return queued


async def _call(
    upstream: UpstreamServer, setup: int | None
) -> tuple[int, PendingCall, InvocationOutcome]:
    connection = await UpstreamSecretBroker().resolve(upstream.endpoint_ref)
    timeouts = ProviderTimeouts(connect=2, read=5)
    hub = InvocationHub()
    _, pending = hub.open(LONG, caller_claims=True)
    data = invocation_input("t-hand-over")
    async with build_adapter("local-upstream", "hand-over", connection, timeouts=timeouts) as ad:
        response = asyncio.create_task(_respond(pending, setup))
        outcome = await attempt_once(
            data, ad, pending, time.monotonic(), AttemptTimeouts(), 30.0, Route()
        )
        return await response, pending, outcome.outcome


async def test_the_first_output_is_sent_before_the_rest_of_a_burst_is_relayed(
    upstream: UpstreamServer,
) -> None:
    queued, pending, outcome = await _call(upstream, RESPONSE_SETUP_TURNS)
    assert queued == 0  # the call's task waited for the first chunk
    assert outcome is InvocationOutcome.COMPLETED
    # The rest of the burst followed, whole.
    rest = [pending.events.get_nowait() for _ in range(pending.events.qsize())]
    assert sum(isinstance(e, TextDelta) for e in rest) > 10


async def test_a_response_that_never_sends_is_not_waited_for(upstream: UpstreamServer) -> None:
    _, pending, outcome = await _call(upstream, None)
    assert not pending.first_sent.is_set()
    assert outcome is InvocationOutcome.COMPLETED  # on after HAND_OVER_TURNS turns, whole
    rest = [pending.events.get_nowait() for _ in range(pending.events.qsize())]
    assert sum(isinstance(e, TextDelta) for e in rest) > 10


@pytest.fixture(autouse=True)
def _fresh(upstream: UpstreamServer) -> None:
    upstream.state.reset()


async def test_the_relay_marks_the_first_output_sent_once_its_chunk_went_out() -> None:
    """The response side of the hand-over: api/wire.relay sets `first_sent` when the server
    asks for the chunk after the first output's, i.e. once that one was sent."""
    data = invocation_input("t-hand-over")
    _, pending = InvocationHub().open(LONG, caller_claims=True)

    async def later() -> AsyncIterator[InvocationEvent]:
        yield TextDelta(text=" world")
        yield ReceiptReady(completed(data))

    running = Running(data.invocation_id, "sim/a", later(), ("sim/a",), pending)
    chunks = relay(running, TextDelta(text="hello"), ChatChunks(data.invocation_id, "p", False))
    sent = [await anext(chunks)]  # the opening (the role)
    sent.append(await anext(chunks))  # the first output's chunk, being sent
    assert b"hello" in sent[-1] and not pending.first_sent.is_set()
    sent.append(await anext(chunks))  # the server asks for the next: the first one went out
    assert pending.first_sent.is_set() and b"world" in sent[-1]
    rest = [c async for c in chunks]
    assert rest and b"[DONE]" in rest[-1]
