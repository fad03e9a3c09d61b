"""A provider stream's tail, read after its answer is whole and off the answer's path, so that
the stream's connection goes back to the pool instead of being closed.

The adapters end an answer at the event that completes it (OpenAI's usage chunk, Anthropic's
`message_delta` with a stop reason) and do not wait for what the provider still sends after it
(`[DONE]`, `message_stop`, the body's end): a provider that never sends those must not hold a
complete answer (`FINISH_GRACE_SECONDS` and its tests). But an HTTP client keeps a connection
for the next request only once the response has been read to its end: aiohttp and httpx2 both
close one whose response is closed before that. A provider that paces its stream sends the tail
a moment after the answer, so every streamed call opened a new connection: against the
simulator with 5 ms between events, 5 streams in a row opened 5 connections through either
transport (2026-12-05), where a provider reached over TLS pays a handshake for each. Without the
pause the tail had already arrived with the answer, and the pooled connection was reused: the
benchmarks, whose simulator does not pause, never saw it.

So the tail is read by a task of its own for at most `TAIL_SECONDS`, then the response is
closed (`close`): at the body's end the connection returns to the pool; a provider still
sending (keep-alives) or silent at the bound loses it, as before. The caller's answer, its
receipt and the attempt's bounds are not touched by it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

# The most a tail is read for. A provider sends `[DONE]` or `message_stop` right after the
# answer's last event; one that keeps a finished stream open longer holds no caller, only a
# connection that is closed at this bound.
TAIL_SECONDS = 2.0

# The tails being read: a task must be referenced until it ends (asyncio keeps only weak ones).
_reading: set[asyncio.Task[None]] = set()


def read_tail_then_close(
    rest: AsyncIterator[object], close: Callable[[], Awaitable[object]]
) -> None:
    """Reads what is left of `rest` (the stream's events), bounded, then calls `close`."""
    task = asyncio.get_running_loop().create_task(_read(rest, close))
    _reading.add(task)
    task.add_done_callback(_reading.discard)


def tails_being_read() -> int:
    return len(_reading)


async def _read(rest: AsyncIterator[object], close: Callable[[], Awaitable[object]]) -> None:
    try:
        # Any failure here (a cut, a malformed tail, the bound) only loses the connection.
        with contextlib.suppress(Exception):
            async with asyncio.timeout(TAIL_SECONDS):
                async for _ in rest:
                    pass
    finally:
        with contextlib.suppress(Exception):
            await close()
