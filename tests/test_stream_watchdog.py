"""The one timer per provider stream (activities/stream_watchdog.py) behind the first-token and
idle bounds: a wait that outlasts its bound ends as a timeout, a stream whose chunks keep coming
never does however long it runs in all, time the consumer spends between waits is not counted,
and a cancellation from elsewhere stays a cancellation. The bounds are wide against the pacing
(10x), so a slow machine cannot turn a kept bound into a missed one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from activities.stream_watchdog import StreamWatchdog


async def _paced(count: int, gap: float) -> AsyncIterator[int]:
    for i in range(count):
        await asyncio.sleep(gap)
        yield i


async def _next(watchdog: StreamWatchdog, stream: AsyncIterator[int], limit: float) -> int:
    """What timed_stream does around each read, reduced to the watchdog."""
    watchdog.waiting(limit)
    try:
        return await anext(stream)
    except asyncio.CancelledError:
        if watchdog.expired():
            raise TimeoutError from None
        raise
    finally:
        watchdog.idle()


async def _read(stream: AsyncIterator[int], limit: float, between: float = 0.0) -> list[int]:
    watchdog = StreamWatchdog()
    seen: list[int] = []
    try:
        while True:
            try:
                seen.append(await _next(watchdog, stream, limit))
            except StopAsyncIteration:
                return seen
            if between:
                await asyncio.sleep(between)  # the consumer's own work, not a wait on the stream
    finally:
        watchdog.close()


async def test_a_wait_past_its_bound_ends_as_a_timeout() -> None:
    never = asyncio.Event()

    async def silent() -> AsyncIterator[int]:
        yield 0
        await never.wait()
        yield 1

    with pytest.raises(TimeoutError):
        await _read(silent(), limit=0.2)


async def test_chunks_within_the_bound_never_expire_however_long_the_stream() -> None:
    # 12 chunks 0.1 s apart: 1.2 s in all, longer than the 1 s bound, no gap near it.
    assert await _read(_paced(12, 0.1), limit=1.0) == list(range(12))


async def test_the_consumers_time_between_waits_is_not_counted() -> None:
    # Each wait is short; the consumer holds each chunk 0.3 s, past the 0.25 s bound.
    assert await _read(_paced(4, 0.0), limit=0.25, between=0.3) == list(range(4))


async def test_a_cancellation_from_elsewhere_stays_a_cancellation() -> None:
    never, reading = asyncio.Event(), asyncio.Event()

    async def silent() -> AsyncIterator[int]:
        reading.set()
        await never.wait()
        yield 0

    reader = asyncio.create_task(_read(silent(), limit=30.0))
    await reading.wait()  # the reader is inside its wait, the watchdog armed
    reader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reader


async def test_a_finished_stream_leaves_no_timer_to_cancel_its_task_later() -> None:
    # The bound (0.1 s) passes while this task goes on after the stream: nothing may fire.
    assert await _read(_paced(3, 0.0), limit=0.1) == [0, 1, 2]
    await asyncio.sleep(0.3)  # past the bound: a timer left armed would cancel this task here
    current = asyncio.current_task()
    assert current is not None and current.cancelling() == 0


async def test_the_bound_cancels_the_task_that_waits_now_not_the_first_reader() -> None:
    """A response's first event is read by the handler's task and the rest by the server's
    writer task: the watchdog must cancel the one that is waiting when the bound passes."""
    never = asyncio.Event()

    async def stalls_after_one() -> AsyncIterator[int]:
        yield 0
        await never.wait()
        yield 1

    watchdog = StreamWatchdog()
    stream = stalls_after_one()
    first_reader = asyncio.create_task(_next(watchdog, stream, 0.2))
    assert await first_reader == 0
    with pytest.raises(TimeoutError):
        await asyncio.create_task(_next(watchdog, stream, 0.2))  # another task, stalled past it
    watchdog.close()
    assert not first_reader.cancelled()


async def test_a_shorter_bound_after_a_longer_one_holds_at_once() -> None:
    """The first token's bound, then the idle one, shorter: the timer armed for the first
    token's fired at its time, so a stream stalled right after its first token was cut at the
    first token's bound (120 s by default) rather than the idle one."""

    async def first_then_stall() -> AsyncIterator[int]:
        yield 0
        await asyncio.Event().wait()  # nothing more, the connection kept
        yield 1  # pragma: no cover

    watchdog = StreamWatchdog()
    stream = first_then_stall()
    try:
        assert await _next(watchdog, stream, limit=30.0) == 0
        stalled = asyncio.ensure_future(_next(watchdog, stream, limit=0.2))
        # Cut by its own 0.2 s bound; armed at 30 s, it was still waiting past this test's 10.
        done, _ = await asyncio.wait({stalled}, timeout=10.0)
        assert stalled in done, "the stalled read outlasted its idle bound"
        assert isinstance(stalled.exception(), TimeoutError)
    finally:
        watchdog.close()
