"""A second gateway for fault tests: its own settings (database, Temporal, task queues), its
workers in this process and its API served over real HTTP by uvicorn, so a test can take a
dependency away from it without touching the suite's shared servers."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client

from api.app import create_app
from core.local_ports import free_port
from core.settings import Settings
from core.temporal import connect
from core.temporal_dev_server import dynamic_config_args
from worker import (
    build_closer_worker,
    build_invocation_worker,
    build_webhook_delivery_worker,
    build_webhook_poll_worker,
    build_worker,
    evaluation_adapters,
)


@dataclass
class Served:
    url: str
    app: FastAPI


@contextlib.asynccontextmanager
async def serve(settings: Settings, client: Client | None = None) -> AsyncIterator[Served]:
    """The API on a free port; with no client it connects to settings.temporal_address itself
    (and keeps trying in the background while Temporal is down)."""
    app = create_app(settings, client)
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=free_port(),
        log_level="warning",
        access_log=False,
        lifespan="on",
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    deadline = time.monotonic() + 30
    while not server.started:
        if task.done() or time.monotonic() > deadline:
            raise RuntimeError("the API did not start")
        await asyncio.sleep(0.02)
    try:
        yield Served(f"http://127.0.0.1:{config.port}", app)
    finally:
        server.should_exit = True
        await task


@contextlib.asynccontextmanager
async def workers(
    settings: Settings, sessions: async_sessionmaker[AsyncSession]
) -> AsyncIterator[Client]:
    """The standalone worker's workers of `settings` (shared, invocations, closers, webhook
    polls and deliveries), on their own connections; yields a client for the test's own use."""
    client = await connect(settings)
    adapters = evaluation_adapters(settings)
    shared = build_worker(client, settings, sessions, adapters=adapters)
    invocations = build_invocation_worker(await connect(settings), settings, sessions)
    closers = build_closer_worker(client, settings, sessions)
    polls = build_webhook_poll_worker(client, settings, sessions)
    deliveries = build_webhook_delivery_worker(client, settings, sessions)
    try:
        async with shared, invocations, closers, polls, deliveries:
            yield client
    finally:
        await adapters.aclose()


class TemporalDevServer:
    """A Temporal dev server of the test's own (in memory), to stop and start on one port, with
    the project's switches (core/temporal_dev_server.py) unless `switches` is False."""

    def __init__(self, work: Path, *, switches: bool = True) -> None:
        self.port = free_port()
        self.metrics_port = free_port()
        self._work = work
        self._switches = dynamic_config_args() if switches else []
        self._proc: subprocess.Popen[bytes] | None = None
        self._binary = str(Path(sys.executable).parent / "temporal")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        log = (self._work / "temporal.log").open("ab")
        self._proc = subprocess.Popen(
            [
                self._binary,
                "server",
                "start-dev",
                "--headless",
                "--ip",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--http-port",
                str(free_port()),
                "--metrics-port",
                str(self.metrics_port),
                "--log-level",
                "error",
                *self._switches,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    async def wait_serving(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                client = await Client.connect(self.address)
                if await client.service_client.check_health():
                    return
            await asyncio.sleep(0.2)
        raise AssertionError(f"Temporal dev server on {self.address} did not come up")

    def pause(self) -> None:
        """Stop the server where it stands (SIGSTOP): connections stay open, nothing answers."""
        assert self._proc is not None
        self._proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self._proc is not None
        self._proc.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(timeout=30)
        self._proc = None


@contextlib.asynccontextmanager
async def own_temporal(work: Path) -> AsyncIterator[TemporalDevServer]:
    """A dev server of the test's own, serving, and killed after (the test may kill it first)."""
    dev = TemporalDevServer(work)
    dev.start()
    try:
        await dev.wait_serving()
        yield dev
    finally:
        dev.kill()


def on_own_temporal(
    settings: Settings, dev: TemporalDevServer, prefix: str, **update: Any
) -> Settings:
    """The suite's settings on `dev`, with task queues of the test's own (`prefix`-…)."""
    run = uuid.uuid4().hex[:8]
    return settings.model_copy(
        update={
            "temporal_address": dev.address,
            "temporal_task_queue": f"{prefix}-{run}",
            "temporal_invocation_task_queue": f"{prefix}-inv-{run}",
            **update,
        }
    )
