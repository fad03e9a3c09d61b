"""InvokeModel's activations run on the API's event loop thread (activities/invoke_setup.py's
InlineWorkflowTasks), not on a pool thread: the loop that asked gets the result, its running
loop is put back after an activation that replaced it (as the SDK's workflow loop does), and a
failure reaches the awaiting SDK as it would from a pool. The whole path through it is every
gateway test: the API's InvokeModel worker is built with it (api/invoke_runtime.py). The first
activation of an invocation whose call this process began waits for that call's outcome, for
HOLD_SECONDS at most; every other activation runs at once."""

from __future__ import annotations

import asyncio
import threading
import uuid

import pytest
from temporalio.bridge.proto.workflow_activation import WorkflowActivation

from activities import invoke_setup
from activities.invoke_hub import InvocationHub
from activities.invoke_setup import InlineWorkflowTasks, first_activation_hold


async def test_an_activation_runs_on_the_loops_own_thread() -> None:
    loop = asyncio.get_running_loop()

    def activation(x: int) -> tuple[int, int]:
        # What the SDK's workflow loop does while it runs: it is the running loop, then none.
        asyncio._set_running_loop(None)
        return threading.get_ident(), x * 2

    ident, doubled = await loop.run_in_executor(InlineWorkflowTasks(), activation, 21)
    assert ident == threading.get_ident() and doubled == 42
    assert asyncio.get_running_loop() is loop  # put back


async def test_a_failed_activation_reaches_the_awaiting_caller() -> None:
    def activation() -> None:
        raise RuntimeError("workflow task failed")

    with pytest.raises(RuntimeError, match="workflow task failed"):
        await asyncio.get_running_loop().run_in_executor(InlineWorkflowTasks(), activation)


async def test_an_activation_sees_none_of_the_callers_context() -> None:
    import contextvars

    marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker", default="unset")
    marker.set("the caller's")
    seen = await asyncio.get_running_loop().run_in_executor(InlineWorkflowTasks(), marker.get)
    assert seen == "unset"  # as on a pool thread: a fresh context


def _initialising(workflow_id: str) -> WorkflowActivation:
    """A workflow's first activation, as the SDK's core hands it over (its initialise job)."""
    act = WorkflowActivation(run_id=uuid.uuid4().hex)
    act.jobs.add().initialize_workflow.workflow_id = workflow_id
    return act


async def _turns(n: int = 20) -> None:
    for _ in range(n):  # loop turns, not time: whatever is ready runs meanwhile
        await asyncio.sleep(0)


async def test_the_first_activation_waits_for_the_outcome_of_the_call_begun_here() -> None:
    hub = InvocationHub()
    invocation = uuid.uuid4()
    _, pending = hub.open(object(), caller_claims=True, invocation_id=invocation)
    tasks = InlineWorkflowTasks(first_activation_hold(hub))
    ran: list[object] = []
    done = asyncio.get_running_loop().run_in_executor(
        tasks, ran.append, _initialising(f"invoke/t/{invocation}")
    )
    await _turns()
    assert ran == []  # the call is in flight: its workflow's first activation waits
    pending.settle()  # its task ended (the receipt closed)
    await asyncio.wait_for(done, 5)
    assert len(ran) == 1


async def test_activations_with_nothing_to_wait_for_run_at_once() -> None:
    hub = InvocationHub()
    settled = uuid.uuid4()
    _, pending = hub.open(object(), caller_claims=True, invocation_id=settled)
    pending.settle()
    # An activity claiming its own call (no API claim) must not be held: it begins the call.
    unclaimed = uuid.uuid4()
    hub.open(object(), caller_claims=False, invocation_id=unclaimed)
    later = WorkflowActivation(run_id="r")
    later.jobs.add().resolve_activity.seq = 1  # not a first activation
    tasks = InlineWorkflowTasks(first_activation_hold(hub))
    loop = asyncio.get_running_loop()
    for act in (
        _initialising(f"invoke/t/{settled}"),
        _initialising(f"invoke/t/{unclaimed}"),
        _initialising(f"invoke/t/{uuid.uuid4()}"),  # begun by another process
        _initialising("lifecycle/t/d"),
        later,
    ):
        ran: list[object] = []
        done = loop.run_in_executor(tasks, ran.append, act)
        await _turns(3)
        assert ran == [act] and done.done()


async def test_a_held_activation_runs_at_its_bound_while_the_call_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(invoke_setup, "HOLD_SECONDS", 0.05)
    hub = InvocationHub()
    invocation = uuid.uuid4()
    _, pending = hub.open(object(), caller_claims=True, invocation_id=invocation)
    ran: list[object] = []
    done = asyncio.get_running_loop().run_in_executor(
        InlineWorkflowTasks(first_activation_hold(hub)),
        ran.append,
        _initialising(f"invoke/t/{invocation}"),
    )
    await asyncio.wait_for(done, 5)  # the call never settles: the bound lets it run
    assert len(ran) == 1 and not pending.settled.done()  # type: ignore[union-attr]
    pending.settle()  # later, the call ends: nothing runs twice
    await _turns()
    assert len(ran) == 1
