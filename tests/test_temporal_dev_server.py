"""The project's dev servers (core/temporal_dev_server.py) read search attributes from their
cache, as a production server does, not from the database on every request as
`temporal server start-dev` does by default. Counted in the server's own persistence metrics,
against a server started without the switches."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import httpx
from temporalio.client import Client

from tests.helpers.deadline import eventually
from tests.helpers.stack import TemporalDevServer

STARTS = 10


def _counter(server: TemporalDevServer, operation: str, service: str) -> float:
    """The server's persistence_requests for one operation of one service, summed over its
    other labels (in whatever order they come)."""
    text = httpx.get(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).text
    sample = re.compile(
        rf'^persistence_requests\{{(?=[^}}]*operation="{operation}")'
        rf'(?=[^}}]*service_name="{service}")[^}}]*\}} (\S+)$',
        re.MULTILINE,
    )
    return sum(float(value) for value in sample.findall(text))


async def _reported(
    server: TemporalDevServer, operation: str, service: str, at_least: float
) -> None:
    """The server reports its metrics on a timer, not as they happen: poll until it has."""
    await eventually(
        lambda: _counter(server, operation, service) >= at_least, timeout=30, interval=0.2
    )


async def _reads_for_starts(tmp_path: Path, *, switches: bool) -> float:
    """Cluster metadata reads in the frontend while STARTS workflows start."""
    server = TemporalDevServer(tmp_path, switches=switches)
    server.start()
    try:
        await server.wait_serving()
        client = await Client.connect(server.address)
        created = _counter(server, "CreateWorkflowExecution", "history")
        before = _counter(server, "GetCurrentClusterMetadata", "frontend")
        for _ in range(STARTS):
            # No worker polls this queue: each start is the frontend's and history's work alone.
            await client.start_workflow(
                "NothingPolls", id=f"dev-switch/{uuid.uuid4()}", task_queue="nobody"
            )
        await _reported(server, "CreateWorkflowExecution", "history", created + STARTS)
        if not switches:
            await _reported(server, "GetCurrentClusterMetadata", "frontend", before + STARTS)
        return _counter(server, "GetCurrentClusterMetadata", "frontend") - before
    finally:
        server.kill()


async def test_search_attributes_are_read_from_the_cache(tmp_path: Path) -> None:
    # The default server reads the cluster's metadata for each start (the control: a metric the
    # server stopped reporting would fail here, not pass unseen); ours reads its cache.
    assert await _reads_for_starts(tmp_path, switches=False) >= STARTS
    assert await _reads_for_starts(tmp_path, switches=True) < STARTS / 2
