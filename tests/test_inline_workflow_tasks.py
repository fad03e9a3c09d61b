"""InvokeModel's activations run on the API's event loop thread (activities/invoke_setup.py's
InlineWorkflowTasks), not on a pool thread: the loop that asked gets the result, its running
loop is put back after an activation that replaced it (as the SDK's workflow loop does), and a
failure reaches the awaiting SDK as it would from a pool. The whole path through it is every
gateway test: the API's InvokeModel worker is built with it (api/invoke_runtime.py)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from activities.invoke_setup import InlineWorkflowTasks


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
