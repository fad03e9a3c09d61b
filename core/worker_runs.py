"""Runs a process's Temporal workers until it is told to stop, then drains them together; a
worker that stops on its own ends the process with the queue it polled named, so that its
platform starts it again."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from temporalio.worker import Worker

log = logging.getLogger("model_router.worker")


class WorkerStopped(RuntimeError):
    """One of the process's workers ended its run while the process was not stopping."""


async def poll_until_stopped(workers: Sequence[Worker], stop: asyncio.Event) -> None:
    """Runs `workers` until `stop` is set, then drains them all at once, each within its 20 s:
    one after the other took up to 40 s, past the platforms' grace, while the others kept
    taking new activities.

    A worker whose run ends before that (the SDK gives a worker up for good after a minute of
    poll errors it does not take for transient, sdk-python#631; or anything else ending its
    run) is logged with its queue and why, the others are drained, and WorkerStopped is
    raised, so that the process exits non-zero and compose or Kubernetes starts it again.
    Under the SDK's `async with` a run that raised cancelled the process's task, with no word
    of which queue, and one that ended without raising left the process up, live and ready by
    its probe (deploy/probes/worker_probe.py, the main queue's pollers only), while that
    worker's queue (invocations, closes, webhook polls or deliveries) was polled by nobody.
    (The API rebuilds its in-process workers in place instead, api/invocation_workers.py, so as
    not to cut the calls it holds; here the restart rebuilds every worker at once.)"""
    runs = {asyncio.create_task(w.run()): w for w in workers}
    stopping = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({stopping, *runs}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        # Also when this wait is cancelled: no worker is left polling behind it.
        stopping.cancel()
        ended = [] if stop.is_set() else [(w, run) for run, w in runs.items() if run.done()]
        for w, run in ended:
            log.error(
                "worker of task queue %s stopped (%s): stopping the process",
                w.task_queue,
                _why(run),
            )
        log.info("worker draining")
        await asyncio.gather(*(w.shutdown() for w in workers), return_exceptions=True)
        # Each run's own end, its exception retrieved (a worker given up raises it).
        await asyncio.gather(*runs, return_exceptions=True)
    if ended:
        queues = ", ".join(w.task_queue for w, _ in ended)
        raise WorkerStopped(f"the worker of task queue {queues} stopped")


def _why(run: asyncio.Task[None]) -> str:
    if run.cancelled():
        return "cancelled"
    exc = run.exception()
    # The type only: an exception's message can carry what it was handling.
    return type(exc).__name__ if exc is not None else "its run ended"
