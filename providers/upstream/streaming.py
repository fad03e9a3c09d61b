"""ASGI responses that misbehave on purpose: late, cut, stalled, or never sent.

They watch for the client going away, so a test client that gives up frees the server task
at once, and for simulator shutdown, so nothing outlives the server.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass

from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send


async def _client_gone(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _first(*waits: Awaitable[object]) -> int:
    """Runs the awaitables until one finishes; returns its position, cancels the rest."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
    finished = next(t for t in tasks if t in done)
    if not finished.cancelled() and finished.exception() is not None:
        raise finished.exception()  # type: ignore[misc]
    return tasks.index(finished)


class HangResponse(Response):
    """Accepts the request and never answers, until the client gives up (or shutdown, which
    answers 503 so the server can stop)."""

    def __init__(self, shutdown: asyncio.Event) -> None:
        # Status 0 in the ledger: no response was ever sent.
        super().__init__(status_code=0)
        self._shutdown = shutdown

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if await _first(_client_gone(receive), self._shutdown.wait()) == 1:
            await JSONResponse({"error": "simulator shutting down"}, 503)(scope, receive, send)


class HangUpResponse(Response):
    """Takes the request, works on it `delay` seconds, then closes the connection without a
    byte of answer: a server that died mid-generation (vLLM killed for memory), or a load
    balancer cutting a request it thought idle. The client going away, or shutdown (answered
    503 so the server can stop), ends it first."""

    def __init__(self, delay: float, shutdown: asyncio.Event) -> None:
        # Status 0 in the ledger: no response was ever sent.
        super().__init__(status_code=0)
        self._delay, self._shutdown = delay, shutdown

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        waited = await _first(
            asyncio.sleep(self._delay), _client_gone(receive), self._shutdown.wait()
        )
        if waited == 2:
            await JSONResponse({"error": "simulator shutting down"}, 503)(scope, receive, send)
        if waited != 0:
            return
        _connection_of(receive).close()
        # Returned before the server has seen the connection closed, the app would be answered
        # for with a 500 (uvicorn's for an app that sent no response): wait until it has.
        await _client_gone(receive)


def _connection_of(receive: Receive) -> asyncio.BaseTransport:
    """The connection a request came on, as uvicorn's request cycle (whose method `receive`
    is) holds it: ASGI has no message that closes a connection before a response starts."""
    transport = getattr(getattr(receive, "__self__", None), "transport", None)
    if not isinstance(transport, asyncio.BaseTransport):
        raise RuntimeError("the hang_up fault needs the simulator's own server (uvicorn)")
    return transport


class DelayedResponse(Response):
    """`inner`, sent after `delay` seconds (a slow non-streamed answer), or once `release` is
    set if that comes first."""

    def __init__(
        self,
        inner: Response,
        delay: float,
        shutdown: asyncio.Event,
        release: asyncio.Event | None = None,
    ) -> None:
        super().__init__()
        self._inner, self._delay, self._shutdown = inner, delay, shutdown
        self._release = release or asyncio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        waited = await _first(
            asyncio.sleep(self._delay),
            _client_gone(receive),
            self._shutdown.wait(),
            self._release.wait(),
        )
        if waited in (0, 3):
            await self._inner(scope, receive, send)


@dataclass(frozen=True)
class KeepAlivePause:
    """Before frame `after` (past the last frame: before the body ends): `seconds` of nothing
    but `frame` (the protocol's keep-alive), sent every `every` seconds."""

    after: int
    seconds: float
    every: float
    frame: bytes


class SimStream(Response):
    """Server-sent events with optional faults.

    `frames` are complete SSE events, the terminator included when one should be sent.
    `content_start` is the frame before which a slow first token waits. `cut_after` closes the
    connection abruptly (no final chunk) after that many frames; `stall_after` goes silent
    after that many frames but keeps the connection open; `keep_alive` pauses the stream with
    keep-alives only. The slow first token's wait and the keep-alive pause end early once
    `release` is set.
    """

    media_type = "text/event-stream"

    def __init__(
        self,
        frames: Sequence[bytes],
        *,
        headers: Mapping[str, str],
        shutdown: asyncio.Event,
        content_start: int = 0,
        first_delay: float = 0.0,
        chunk_delay: float = 0.0,
        cut_after: int | None = None,
        cut_gracefully: bool = False,
        stall_after: int | None = None,
        keep_alive: KeepAlivePause | None = None,
        release: asyncio.Event | None = None,
    ) -> None:
        super().__init__(headers={**headers, "cache-control": "no-cache"})
        self._frames = list(frames)
        self._shutdown = shutdown
        self._content_start = content_start
        self._first_delay = first_delay
        self._chunk_delay = chunk_delay
        self._cut_after = cut_after
        self._cut_gracefully = cut_gracefully
        self._stall_after = stall_after
        self._keep_alive = keep_alive
        self._release = release or asyncio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(k, v) for k, v in self.raw_headers if k != b"content-length"]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await _first(self._produce(send), _client_gone(receive), self._shutdown.wait())

    async def _produce(self, send: Send) -> None:
        for i, frame in enumerate(self._frames):
            if self._cut_after is not None and i >= self._cut_after:
                if self._cut_gracefully:
                    break
                # Returning without the final body message makes the server drop the
                # connection mid-body: the client sees an incomplete chunked read. (uvicorn
                # logs "ASGI callable returned without completing response" for it.)
                return
            if self._stall_after is not None and i >= self._stall_after:
                await asyncio.Event().wait()
            if self._keep_alive is not None and i == self._keep_alive.after:
                await self._pause(send, self._keep_alive)
            if i == self._content_start and self._first_delay:
                await _first(asyncio.sleep(self._first_delay), self._release.wait())
            elif i > self._content_start and self._chunk_delay:
                await asyncio.sleep(self._chunk_delay)
            await send({"type": "http.response.body", "body": frame, "more_body": True})
        if self._keep_alive is not None and self._keep_alive.after >= len(self._frames):
            await self._pause(send, self._keep_alive)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _pause(self, send: Send, pause: KeepAlivePause) -> None:
        loop = asyncio.get_running_loop()
        ends = loop.time() + pause.seconds
        while (left := ends - loop.time()) > 0:
            if await _first(asyncio.sleep(min(pause.every, left)), self._release.wait()) == 1:
                return
            await send({"type": "http.response.body", "body": pause.frame, "more_body": True})
