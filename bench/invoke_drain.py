"""Waiting for a measurement's workflows to close: a window that ends with the callers' last
answer leaves the InvokeModel workflows still running behind it (their local activity's result,
their completion), and the dev server's CPU for them would be counted in the next window."""

from __future__ import annotations

import asyncio
import time

from temporalio.client import Client

DRAIN_SECONDS = 60.0  # a window's last workflows complete well within this
RUNNING_INVOKES = "WorkflowType = 'InvokeModel' AND ExecutionStatus = 'Running'"


async def drained(client: Client, query: str = RUNNING_INVOKES) -> None:
    """Return once no workflow matches `query` (polled with a deadline)."""
    deadline = time.monotonic() + DRAIN_SECONDS
    while (await client.count_workflows(query)).count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"workflows still running after {DRAIN_SECONDS:.0f} s: {query}")
        await asyncio.sleep(0.02)
