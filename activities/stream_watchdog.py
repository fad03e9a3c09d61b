"""One timer per provider stream for its first-token and idle bounds, instead of a timeout
scope around every chunk.

A timeout scope arms and cancels a loop timer for each chunk: 3.2 µs a chunk on uvloop, timed
alone (1.0 → 4.2 µs per item of an async stream, bench/, 2026-12-01), two scopes a chunk on the
invoke path. Here a chunk only moves a deadline (a float); the one timer looks at it when it
fires and goes back to sleep until the deadline if the stream moved on meanwhile. Bounds are
seconds long and chunks milliseconds apart, so it fires about once per bound, not per chunk.
"""

from __future__ import annotations

import asyncio


class StreamWatchdog:
    """Cancels the task that waits on a stream once a wait outlasts its bound. `waiting(limit)`
    before each wait, `idle()` after it; `expired()` tells, when the wait was cancelled, whether
    this watchdog did it (and takes its cancellation back, as a timeout scope would)."""

    __slots__ = ("_armed", "_deadline", "_fired", "_handle", "_loop", "_task", "_waiting")

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task: asyncio.Task[object] | None = None
        self._deadline = 0.0
        self._waiting = False
        self._fired = False
        self._handle: asyncio.TimerHandle | None = None
        self._armed = 0.0  # when the timer fires

    def waiting(self, limit: float) -> None:
        # The task that waits now: an async generator may be driven by one task, then another
        # (a response's first event is read by the handler, the rest by the server's writer).
        self._task = asyncio.current_task()
        self._deadline = self._loop.time() + limit
        self._waiting = True
        if self._handle is None:
            self._arm()
        elif self._deadline < self._armed:
            # A bound shorter than the one armed (the idle bound after the first token's):
            # the timer fired at the old one, and a stream stalled after its first token was
            # cut at the first token's bound (120 s) instead of the idle one. Once a stream:
            # later deadlines only move on.
            self._handle.cancel()
            self._arm()

    def idle(self) -> None:
        self._waiting = False

    def expired(self) -> bool:
        if not self._fired:
            return False
        self._fired = False
        # Ours alone: a cancellation from elsewhere (the caller left) stays a cancellation.
        return self._task is not None and self._task.uncancel() == 0

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _arm(self) -> None:
        self._armed = self._deadline
        self._handle = self._loop.call_at(self._deadline, self._check)

    def _check(self) -> None:
        self._handle = None
        if not self._waiting:
            return  # re-armed by the next wait
        if self._loop.time() < self._deadline:
            self._arm()
            return
        if self._task is None:  # pragma: no cover - armed only by waiting(), inside a task
            return
        self._fired = True
        self._task.cancel()
