"""When the gate lets a call's provider call begin before its own start is in, on a real dev
server: after a quiet spell, once the server's health service answers (an idle process no longer
begins every call after its start's reply), that check asked as the call arrived and taken while
it is fresh; never while a start has waited longer than the window (a frontend that answers
while its store does not), never with no window, and never when the server refuses the check.
A start here is `TemporalGate.start` running a start the test holds, as a real start waits for
a server that has not answered yet. A start the server refuses (a namespace it does not have,
its rate limit) is refused as that, not as Temporal unreachable, and the gate stays open."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from api.problems import Problem
from api.temporal_gate import Asked, TemporalGate
from core import metrics
from tests.helpers.deadline import eventually
from tests.helpers.stack import TemporalDevServer, own_temporal

WAIT = 30.0  # the start's bound: never reached here


class HeldStart:
    """A start that is in once the test lets it be."""

    def __init__(self) -> None:
        self.released = asyncio.Event()

    async def __call__(self) -> str:
        await self.released.wait()
        return "handle"


def under_way(gate: TemporalGate, begin: Callable[[], Awaitable[str]]) -> asyncio.Task[str]:
    return asyncio.ensure_future(gate.start(begin))


async def accepted() -> str:
    return "handle"


@pytest.fixture
async def gate(temporal_client: Client) -> AsyncIterator[TemporalGate]:
    gate = TemporalGate(temporal_client, WAIT, 0.25)
    yield gate
    await gate.aclose()


async def test_after_a_quiet_spell_the_call_begins_once_the_health_service_answers(
    gate: TemporalGate,
) -> None:
    assert not gate.answered_recently()  # no start accepted yet: the window is no help
    held = HeldStart()
    start = under_way(gate, held)
    assert await gate.answers_before(start)
    assert not start.done()  # the call begins while its start is still under way
    held.released.set()
    assert await start == "handle"
    assert gate.answered_recently()  # the start just accepted opens the window


async def test_a_start_in_first_means_the_call_begins_after_it(gate: TemporalGate) -> None:
    start = under_way(gate, accepted)
    await start
    assert not await gate.answers_before(start)


async def test_a_start_waiting_longer_than_the_window_keeps_calls_after_their_starts(
    gate: TemporalGate,
) -> None:
    held = HeldStart()
    stuck = under_way(gate, held)
    other = under_way(gate, HeldStart())

    async def not_taken() -> bool:
        return not await gate.answers_before(other)

    # The health service keeps answering (as a frontend does while its store does not); once
    # one start has waited longer than the window, that is no longer taken for Temporal
    # answering.
    await eventually(not_taken, timeout=10)
    assert await gate.healthy()
    held.released.set()
    await stuck
    other.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await other
    fresh = under_way(gate, HeldStart())
    assert await gate.answers_before(fresh)  # those starts over, the check counts again
    fresh.cancel()


async def test_no_window_means_every_call_waits_for_its_start(temporal_client: Client) -> None:
    gate = TemporalGate(temporal_client, WAIT, 0.0)
    start = under_way(gate, HeldStart())
    try:
        assert not await gate.answers_before(start)
    finally:
        start.cancel()
        await gate.aclose()


@pytest.fixture
async def own_server(tmp_path: Path) -> AsyncIterator[TemporalDevServer]:
    """A dev server of this test's own, for a test that kills it."""
    async with own_temporal(tmp_path) as dev:
        yield dev


@contextlib.asynccontextmanager
async def held_on(
    dev: TemporalDevServer, window: float
) -> AsyncIterator[tuple[TemporalGate, Callable[[], asyncio.Task[str]]]]:
    """A gate on `dev` with this window, and a way to put a held start under way on it; every
    start put under way is cancelled and the gate closed afterwards."""
    gate = TemporalGate(await Client.connect(dev.address), WAIT, window)
    starts: list[asyncio.Task[str]] = []

    def held() -> asyncio.Task[str]:
        starts.append(under_way(gate, HeldStart()))
        return starts[-1]

    try:
        yield gate, held
    finally:
        for start in starts:
            start.cancel()
        await gate.aclose()


async def answered_ahead(gate: TemporalGate) -> Asked:
    """The check asked as a call arrives, once it has answered (as it does while the call is
    routed and claimed)."""
    asked = gate.ask_ahead()
    assert asked is not None
    assert await asked.answer
    return asked


async def test_a_server_that_refuses_the_check_leaves_the_call_waiting_for_its_start(
    own_server: TemporalDevServer,
) -> None:
    async with held_on(own_server, 0.25) as (gate, held):
        start = held()
        assert await gate.answers_before(start)  # up: the health service answers
        own_server.kill()  # gone: its port refuses connections
        assert not await gate.answers_before(start)
        assert not start.done()  # refused before the start ended: the call waits for it


async def test_the_check_asked_as_the_call_arrived_is_the_one_its_start_is_raced_with(
    own_server: TemporalDevServer,
) -> None:
    # A window far longer than this test, so that the check asked stays fresh however slow
    # the machine is.
    async with held_on(own_server, 600.0) as (gate, held):
        asked = await answered_ahead(gate)
        own_server.kill()  # gone after the check answered: no new check would be answered
        start = held()
        assert await gate.answers_before(start, asked)  # taken as asked, nothing asked again
        assert not await gate.answers_before(start)  # a check asked now is refused


async def test_a_check_asked_longer_ago_than_the_window_is_asked_again(
    own_server: TemporalDevServer,
) -> None:
    async with held_on(own_server, 0.05) as (gate, held):
        asked = await answered_ahead(gate)

        async def stale() -> bool:
            return time.monotonic() - asked.sent_at >= 0.05

        await eventually(stale, timeout=10)
        own_server.kill()
        assert not await gate.answers_before(held(), asked)  # asked again, and refused


async def test_nothing_is_asked_ahead_while_the_window_is_open_or_temporal_is_down(
    temporal_client: Client,
) -> None:
    gate = TemporalGate(temporal_client, WAIT, 600.0)  # open for the whole test once a start is in
    no_window = TemporalGate(temporal_client, WAIT, 0.0)
    try:
        assert no_window.ask_ahead() is None
        await under_way(gate, accepted)
        assert gate.answered_recently()
        assert gate.ask_ahead() is None  # a start was just accepted: nothing to ask
        gate.mark_down("test")
        assert gate.ask_ahead() is None  # known unreachable: calls are refused, not checked
    finally:
        await gate.aclose()
        await no_window.aclose()


async def test_a_hold_for_the_process_own_workers_is_refused_as_such_not_as_temporal(
    gate: TemporalGate,
) -> None:
    """An operator paging on `temporal-unreachable` is not sent to a healthy cluster because
    one process's worker is being built again; once Temporal itself is down, that is said."""
    gate.hold("caller worker stopped")
    with pytest.raises(Problem) as held:
        gate.check()
    assert held.value.status == 503 and held.value.extensions["reason"] == "worker-restarting"
    assert held.value.headers["Retry-After"] == str(gate.retry_after)
    assert "invocation worker" in held.value.detail and not gate.down
    gate.mark_down("test")  # Temporal gone too: its refusal is the one that tells the truth
    with pytest.raises(Problem) as down:
        gate.check()
    assert down.value.extensions["reason"] == "temporal-unreachable"
    gate.release()
    assert not gate.reachable  # still down: the release lifts only the hold


async def test_a_start_the_server_refuses_is_counted_as_refused_not_as_unreachable(
    temporal_client: Client,
) -> None:
    """A server that answers and refuses the start (here a namespace that does not exist: the
    real dev server's NOT_FOUND) is no outage: refused as `temporal-refused`, its status named,
    while the gate stays open and `/readyz` says so. Counted `temporal-unreachable` and worded as
    an outage, it sent the operator following the runbook after a cluster that answers."""
    missing = Client(temporal_client.service_client, namespace=f"missing-{uuid.uuid4().hex[:8]}")
    gate = TemporalGate(temporal_client, WAIT, 0.25)
    refused = metrics.refusals.value({"reason": "temporal-refused"})
    unreachable = metrics.refusals.value({"reason": "temporal-unreachable"})

    async def begin() -> WorkflowHandle[Any, Any]:
        return await missing.start_workflow("Nothing", id="nothing", task_queue="nowhere")

    try:
        with pytest.raises(Problem) as answer:
            await gate.start(begin)
    finally:
        await gate.aclose()
    problem = answer.value
    assert problem.status == 503 and problem.extensions["reason"] == "temporal-refused"
    assert problem.type == "https://model-router.dev/problems/temporal-refused"
    assert problem.extensions["temporalStatus"] == "NOT_FOUND"
    assert "configuration" in problem.detail and "not reachable" not in problem.detail
    assert problem.headers["Retry-After"] == str(gate.retry_after)
    assert metrics.refusals.value({"reason": "temporal-refused"}) == refused + 1
    assert metrics.refusals.value({"reason": "temporal-unreachable"}) == unreachable
    assert gate.reachable and not gate.down  # the server answered: calls go on to it


async def test_a_start_over_the_namespace_rate_limit_is_refused_with_retry_after(
    gate: TemporalGate,
) -> None:
    """RESOURCE_EXHAUSTED (the namespace's rate limit), which the dev server does not give on
    demand: the start's own call raises it, as the SDK raises the server's refusal. A 503 with
    Retry-After, counted `temporal-refused`, the gate open."""
    refused = metrics.refusals.value({"reason": "temporal-refused"})

    async def throttled() -> str:
        raise RPCError("namespace rate limit exceeded", RPCStatusCode.RESOURCE_EXHAUSTED, b"")

    with pytest.raises(Problem) as answer:
        await gate.start(throttled)
    assert answer.value.status == 503 and answer.value.extensions["reason"] == "temporal-refused"
    assert answer.value.extensions["temporalStatus"] == "RESOURCE_EXHAUSTED"
    assert "rate limit" in answer.value.detail
    assert answer.value.headers["Retry-After"] == str(gate.retry_after)
    assert metrics.refusals.value({"reason": "temporal-refused"}) == refused + 1
    assert gate.reachable
