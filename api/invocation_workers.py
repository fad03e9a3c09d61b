"""The API process's in-process Temporal workers, kept running.

Eager start and adopting a call in flight both need this process's own workers: one on the
invocations queue (an eager start's workflow task runs there, its local activity adopting the
call from the hub) and one on the caller queue only this process polls. A worker that stops on
its own (the SDK gives a worker up for good after a run of poll errors it does not take for
transient, sdk-python#631; or anything else ending its `run`) used to go unnoticed: the process
stayed ready, its starts were no longer eager, and each call's activity waited on a caller
queue nobody polled until the workflow closed the call's receipt Failed (`caller-lost`) while
the call still ran. Now the stop is logged, the gate refuses invocations while the workers are
down (503 with Retry-After, `/readyz` not ready), and both are built again after a backoff
(1 s, doubling to 30 s; back to 1 s once a set ran a minute)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from temporalio.worker import Worker

log = logging.getLogger("model_router.api")

FIRST_BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 30.0
# A set of workers that ran this long before stopping starts the backoff over.
STEADY_SECONDS = 60.0


class InvocationWorkers:
    def __init__(
        self,
        build: Callable[[], list[Worker]],
        down: Callable[[str], None],
        up: Callable[[], None],
    ) -> None:
        self._build = build
        self._down = down
        self._up = up
        self._workers: list[Worker] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._keeper: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def current(self) -> list[Worker]:
        """The workers running now (their replacements, after a stop)."""
        return list(self._workers)

    def start(self) -> None:
        self._keeper = asyncio.create_task(self._keep_running())

    async def _keep_running(self) -> None:
        loop = asyncio.get_running_loop()
        backoff = FIRST_BACKOFF_SECONDS
        while not self._stopping:
            self._workers = self._build()
            self._tasks = [asyncio.create_task(w.run()) for w in self._workers]
            self._up()
            began = loop.time()
            done, _ = await asyncio.wait(self._tasks, return_when=asyncio.FIRST_COMPLETED)
            if self._stopping:
                return
            why = _why(done)
            log.error("in-process worker stopped (%s): refusing invocations, rebuilding", why)
            self._down(f"in-process worker stopped ({why})")
            await self._shut_down()
            if loop.time() - began >= STEADY_SECONDS:
                backoff = FIRST_BACKOFF_SECONDS
            await asyncio.sleep(backoff)  # a retry interval, not a wait-for
            backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)

    async def _shut_down(self) -> None:
        for worker in self._workers:
            with contextlib.suppress(Exception):
                await worker.shutdown()
        for task in self._tasks:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await task

    async def stop(self) -> None:
        self._stopping = True
        await self._shut_down()
        if self._keeper is not None:
            self._keeper.cancel()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await self._keeper


def _why(done: set[asyncio.Task[None]]) -> str:
    for task in done:
        if task.cancelled():
            return "cancelled"
        exc = task.exception()
        if exc is not None:
            return type(exc).__name__
    return "its run ended"
