"""The HTTP transport under the provider SDKs. The SDK still builds every request (auth, base
URL, headers) and maps every status error; only the client it sends them through changes.

aiohttp, the SDKs' own optional transport (`openai.DefaultAioHttpClient`,
`anthropic.DefaultAioHttpClient`), is the default: its C HTTP parser cost the adapters 36-40%
less CPU per streamed ~35-token answer than the default httpx2 client at concurrency 1 and
about 50% less at 16, and 21-28% less per embedding call (bench/bench_provider_transport.py,
2026-12-01, the streams measured again on 2026-12-05 once httpx2's reused their connections,
providers/stream_tail.py; docs/benchmarks.md). httpx2 stays selectable per adapter, for that
benchmark and the tests that hold both transports to the same error kinds.

Both clients are built with the SDK's own defaults, at most 1000 connections, but for how long
an idle one is kept: `provider_keepalive_seconds` (120 s) instead of 5 s (`keeping_idle`;
core/settings.py says why). aiohttp has no separate cap on idle connections (httpx2 keeps
100) and no write timeout (requests are small; the connect, pool and read bounds apply as
before). Its session is opened on the first request and closed with the SDK client
(`ProviderAdapter.aclose`).

A connection kept alive is the provider's to close once it has sat idle for its own timeout
(5 s for uvicorn, and so for vLLM and this project's simulator; 5 s for Node). A request sent
on one at that moment finds it closed, before any byte of an answer. Reproduced against the
simulator (2026-12-05): bursts of 16 concurrent streams, 4.99 s apart, each lost 13 and 16 of
16 calls so, as connection errors. Behind the gateway such a burst trips the deployment's
breaker (three transient failures) and its callers get 503s from a healthy provider; a paired
benchmark met one (docs/benchmarks.md, thirtieth pass). aiohttp sends such a request again by
itself only for idempotent methods, and every model call is a POST. So `ResendOnHangUp` sends
a request once more, at once, when the provider hung up before its status line: the way a
browser treats a connection that closed under it. Only the resent request's outcome is the
call's; a provider that hangs up on every request is asked twice per attempt, then fails as a
connection error as before. A refused connection is not sent again here (the attempt's retry
rules decide), nor is anything that failed after the status line (that answer may have
started), nor a request the provider held longer than `RESEND_WITHIN_SECONDS` before hanging
up: that is no keep-alive race but a provider that took the request and died on it (see
there).

httpx's pool (the rerank adapter's own client, and httpx2 under the SDKs when chosen) has the
same race: it drops an idle connection whose close has already arrived, not one whose close is
on its way. Against `tests/helpers/hang_up_proxy.py` a rerank request on such a connection
failed as `connection: ReadError` (reset) or "Server disconnected without sending a response"
(FIN), so `ResendOnHangUpHttpx` and the httpx2 client are wrapped too. httpx raises only before
the status line from `handle_async_request` (the body is read later), so a reset, a broken
pipe or that disconnect there is a hang-up; an answer the server garbled is not one, as with
aiohttp.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Literal, TypeVar

import aiohttp
import httpx
import httpx2

HttpTransport = Literal["aiohttp", "httpx2"]
DEFAULT_TRANSPORT: HttpTransport = "aiohttp"

log = logging.getLogger(__name__)


# How soon after a request was handed to the transport a hang-up may still be the keep-alive
# race, and the request sent once more. The race ends within one round trip of the request
# going out on the kept connection: the provider's close was already on its way, or the
# request met a closed socket and its reset came back. A round trip to a provider's region is
# under 0.3 s even across an ocean; the rest is for an event loop busy with other calls (a
# race seen later fails the attempt as a connection error, which its retry rules retry).
# Whether aiohttp reused the connection is not said by what it raises, and a new connection
# is no safer: its hang-up within this bound is no more than a provider refusing at once.
# Past it the provider held the request: a non-stream call's status line comes only after the
# whole generation, so a server that died mid-generation (vLLM killed for memory, a load
# balancer's idle cut) hung up on a request it had worked on, and perhaps billed. Sent again
# at once, it doubled that work and that bill; now the attempt's retry rules decide, as for
# any connection error (with backoff, and a breaker strike).
RESEND_WITHIN_SECONDS = 0.5

# What httpx and httpx2 raise for a connection reset or closed under a request they are sending.
_HTTPX_RESETS = (httpx.ReadError, httpx.WriteError, httpx2.ReadError, httpx2.WriteError)
_HTTPX_PROTOCOL = (httpx.RemoteProtocolError, httpx2.RemoteProtocolError)
# httpcore's words (and httpcore2's) for a connection closed before a byte of the answer came.
_DISCONNECTED = "Server disconnected without sending a response"


def hung_up_before_answering(exc: BaseException) -> bool:
    """Whether the provider closed the connection (or reset it) before the answer's status line
    came. Under the SDK's aiohttp transport these are aiohttp's own words, under the SDK's
    mapping of them (`exc.__cause__`), and a connection that could not be opened at all
    (`ClientConnectorError`) is not a hang-up. Under httpx or httpx2, raised while sending
    (never after the status line: see the module docstring)."""
    cause = exc.__cause__
    if isinstance(cause, aiohttp.ClientError):
        if isinstance(cause, aiohttp.ServerDisconnectedError):
            return True
        return isinstance(cause, aiohttp.ClientOSError) and not isinstance(
            cause, aiohttp.ClientConnectorError
        )
    if isinstance(exc, _HTTPX_PROTOCOL):
        return str(exc).startswith(_DISCONNECTED)
    return isinstance(exc, _HTTPX_RESETS)


def _send_again(exc: BaseException, request: httpx.Request | httpx2.Request, began: float) -> bool:
    """Whether a request that failed so is sent once more: the provider hung up before answering
    it, within `RESEND_WITHIN_SECONDS` of its being handed to the transport at `began` (the
    monotonic clock), and its body is already in memory (the SDKs send JSON bytes), not a
    stream. The transports below call this only on a failure: a call that succeeds pays one
    `try` and one reading of the clock."""
    if time.monotonic() - began > RESEND_WITHIN_SECONDS or not hung_up_before_answering(exc):
        return False
    try:
        request.content  # noqa: B018 - raises on a body that is a stream not yet read
    except (httpx.RequestNotRead, httpx2.RequestNotRead):
        return False
    log.info("%s hung up before answering: the request is sent once more", request.url.host)
    return True


class ResendOnHangUp(httpx2.AsyncBaseTransport):
    """The SDK's transport, with a request the provider hung up on before answering sent once
    more (module docstring)."""

    def __init__(self, inner: httpx2.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        began = time.monotonic()
        try:
            return await self._inner.handle_async_request(request)
        except httpx2.TransportError as exc:
            if not _send_again(exc, request, began):
                raise
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


class ResendOnHangUpHttpx(httpx.AsyncBaseTransport):
    """`ResendOnHangUp` for a plain httpx client (the rerank adapter's)."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        began = time.monotonic()
        try:
            return await self._inner.handle_async_request(request)
        except httpx.TransportError as exc:
            if not _send_again(exc, request, began):
                raise
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


def keeping_idle(limits: httpx2.Limits, seconds: float) -> httpx2.Limits:
    """The SDK's `limits` with idle connections kept `seconds` instead of their 5 s
    (core/settings.py: `provider_keepalive_seconds`). Under aiohttp this is the connector's
    `keepalive_timeout`."""
    return httpx2.Limits(
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=seconds,
    )


Client = TypeVar("Client", httpx.AsyncClient, httpx2.AsyncClient)


def resending(client: Client) -> Client:
    """The client with each of its transports wrapped in `ResendOnHangUp` (httpx2: the SDKs'
    `DefaultAioHttpClient` or `DefaultAsyncHttpxClient`) or `ResendOnHangUpHttpx` (httpx).
    Both keep the direct transport in `_transport` and one per proxy from the environment in
    `_mounts`; wrapping them after the client is built keeps those proxies, which a transport
    passed to the constructor would turn off."""
    wrap: Any = ResendOnHangUpHttpx if isinstance(client, httpx.AsyncClient) else ResendOnHangUp
    client._transport = wrap(client._transport)
    client._mounts = {
        pattern: None if mounted is None else wrap(mounted)
        for pattern, mounted in client._mounts.items()
    }
    return client
