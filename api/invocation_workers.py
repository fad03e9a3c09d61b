"""The API process's in-process Temporal workers, kept running.

Eager start and adopting a call in flight both need this process's own workers: one on the
invocations queue (an eager start's workflow task runs there, its local activity adopting the
call from the hub) and one on the caller queue only this process polls. A worker that stops on
its own (the SDK gives a worker up for good after a run of poll errors it does not take for
transient, sdk-python#631; or anything else ending its `run`) used to go unnoticed: the process
stayed ready, its starts were no longer eager, and each call's activity waited on a caller
queue nobody polled until the workflow closed the call's receipt Failed (`caller-lost`) while
the call still ran. Now the stop is logged, the gate refuses invocations while any worker is
down (503 with Retry-After, `/readyz` not ready), and that worker alone is built again after a
backoff (1 s, doubling to 30 s; back to 1 s once it ran a minute): the other one, and the calls
its activities hold, are left running."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence

from temporalio.client import Client
from temporalio.worker import Worker

log = logging.getLogger("model_router.api")

FIRST_BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 30.0
# A worker that ran this long before stopping starts its backoff over.
STEADY_SECONDS = 60.0


class InvocationWorkers:
    def __init__(
        self,
        builds: Sequence[Callable[[], Worker]],
        down: Callable[[str], None],
        up: Callable[[], None],
    ) -> None:
        self._builds = list(builds)
        self._down = down
        self._up = up
        self._workers: list[Worker | None] = [None] * len(self._builds)
        self._running: list[asyncio.Task[None] | None] = [None] * len(self._builds)
        self._keepers: list[asyncio.Task[None]] = []
        self._stopped: set[int] = set()  # slots whose worker is down
        self._stopping = False

    @property
    def current(self) -> list[Worker]:
        """The workers running now (their replacements, after a stop)."""
        return [w for w in self._workers if w is not None]

    def rebind(self, client: Client) -> None:
        """The running workers poll on `client` from their next poll (`Worker.client`); one
        rebuilt later is built on it by its build, and one whose run has ended (its rebuild
        due) is left as it is: the SDK refuses a new client for it."""
        for worker, run in zip(self._workers, self._running, strict=True):
            if worker is not None and run is not None and not run.done():
                worker.client = client

    def start(self) -> None:
        self._keepers = [
            asyncio.create_task(self._keep_running(slot)) for slot in range(len(self._builds))
        ]

    async def _keep_running(self, slot: int) -> None:
        loop = asyncio.get_running_loop()
        backoff = FIRST_BACKOFF_SECONDS
        while not self._stopping:
            began = loop.time()
            try:
                worker = self._workers[slot] = self._builds[slot]()
                run = self._running[slot] = asyncio.create_task(worker.run())
                if slot in self._stopped:
                    self._stopped.discard(slot)
                    if not self._stopped:
                        self._up()
                await asyncio.wait({run})
                why = _why(run)
            except Exception as exc:  # the worker could not even be built
                why = type(exc).__name__
            if self._stopping:
                return
            log.error("in-process worker stopped (%s): refusing invocations, rebuilding", why)
            self._stopped.add(slot)
            self._down(f"in-process worker stopped ({why})")
            await self._shut_down(slot)
            if loop.time() - began >= STEADY_SECONDS:
                backoff = FIRST_BACKOFF_SECONDS
            await asyncio.sleep(backoff)  # a retry interval, not a wait-for
            backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)

    async def _shut_down(self, slot: int) -> None:
        worker, run = self._workers[slot], self._running[slot]
        self._workers[slot] = self._running[slot] = None
        if worker is not None:
            with contextlib.suppress(Exception):
                await worker.shutdown()
        if run is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await run

    async def stop(self) -> None:
        self._stopping = True
        for slot in range(len(self._builds)):
            await self._shut_down(slot)
        for keeper in self._keepers:
            keeper.cancel()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await keeper


def _why(run: asyncio.Task[None]) -> str:
    if run.cancelled():
        return "cancelled"
    exc = run.exception()
    return type(exc).__name__ if exc is not None else "its run ended"
