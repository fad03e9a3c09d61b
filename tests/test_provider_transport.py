"""The SDKs' aiohttp transport (providers/transport.py) fails the way their httpx2 client did:
a refused connection, a server that hangs up or resets before answering, a stream cut or
stalled mid-answer and a silent server map to the same error kinds under both transports, for
the OpenAI and the Anthropic adapter. And the aiohttp session an adapter opens is closed with
the adapter: no unclosed session or connector is left behind. Real SDK clients over HTTP to
the upstream simulator, or to a raw socket server that misbehaves below HTTP."""

from __future__ import annotations

import asyncio
import gc
import socket
import struct
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from core.local_ports import free_port
from providers.anthropic_adapter import AnthropicAdapter
from providers.base import ProviderAdapter
from providers.errors import ErrorKind, ProviderError
from providers.openai_adapter import OpenAIAdapter
from providers.secrets import Connection
from providers.stream_tail import tails_being_read
from providers.transport import HttpTransport
from providers.types import (
    Accepted,
    ChatRequest,
    Finish,
    Message,
    ProviderTimeouts,
    StreamEvent,
    TextDelta,
)
from providers.upstream import Fault, FaultKind, UpstreamServer
from tests.helpers.deadline import eventually

MODEL = "transport-sim"
HELLO = ChatRequest(messages=(Message(role="user", content="hello world"),))
TIMEOUTS = ProviderTimeouts(connect=1, read=0.4)
TRANSPORTS: list[HttpTransport] = ["aiohttp", "httpx2"]
Build = Callable[[str], ProviderAdapter]


@pytest.fixture(autouse=True)
def fresh(upstream: UpstreamServer) -> None:
    upstream.state.reset()


def _adapter(provider: str, transport: HttpTransport, base_url: str) -> ProviderAdapter:
    connection = Connection.model_validate({"api_key": "sk-transport-test", "base_url": base_url})
    if provider == "openai":
        return OpenAIAdapter(
            model=MODEL,
            connection=connection,
            timeouts=TIMEOUTS,
            provider="local-upstream",
            transport=transport,
        )
    return AnthropicAdapter(
        model=MODEL, connection=connection, timeouts=TIMEOUTS, transport=transport
    )


@pytest.fixture(params=["openai", "anthropic"])
def provider(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=TRANSPORTS)
async def build(request: pytest.FixtureRequest, provider: str) -> AsyncIterator[Build]:
    """Adapters of this provider and transport on any base URL, closed after the test."""
    built: list[ProviderAdapter] = []

    def make(base_url: str) -> ProviderAdapter:
        built.append(_adapter(provider, request.param, base_url))
        return built[-1]

    yield make
    for adapter in built:
        await adapter.aclose()


def _base(upstream: UpstreamServer, provider: str) -> str:
    return upstream.openai_base_url if provider == "openai" else upstream.base_url


async def _drain(adapter: ProviderAdapter) -> list[StreamEvent]:
    return [event async for event in adapter.stream(HELLO)]


async def _failure(adapter: ProviderAdapter, streamed: bool) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        await (_drain(adapter) if streamed else adapter.complete(HELLO))
    return caught.value


@pytest.fixture
async def misbehaving() -> AsyncIterator[Callable[[str], Awaitable[str]]]:
    """A TCP server that reads the request and then, by mode, closes the connection (`hangup`)
    or resets it (`reset`, SO_LINGER 0) without a byte of response; gives its base URL."""
    servers: list[asyncio.Server] = []

    async def serve(mode: str) -> str:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            if mode == "reset":
                sock = writer.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        servers.append(server)
        return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"

    yield serve
    for server in servers:
        server.close()
        await server.wait_closed()


def _closed_port() -> str:
    return f"http://127.0.0.1:{free_port()}/v1"


@pytest.mark.parametrize("streamed", [True, False], ids=["stream", "complete"])
async def test_a_refused_connection_is_a_connection_error(build: Build, streamed: bool) -> None:
    # The openai SDK's vendored aiohttp transport calls this a ConnectTimeout; it is not one.
    failure = await _failure(build(_closed_port()), streamed)
    assert failure.kind is ErrorKind.CONNECTION and failure.transient


@pytest.mark.parametrize("mode", ["hangup", "reset"])
@pytest.mark.parametrize("streamed", [True, False], ids=["stream", "complete"])
async def test_a_server_that_drops_the_request_is_a_connection_error(
    build: Build,
    misbehaving: Callable[[str], Awaitable[str]],
    mode: str,
    streamed: bool,
) -> None:
    failure = await _failure(build(await misbehaving(mode)), streamed)
    assert failure.kind is ErrorKind.CONNECTION and failure.transient


@pytest.mark.parametrize("graceful", [False, True], ids=["dropped", "closed"])
async def test_a_cut_stream_is_incomplete(
    build: Build, upstream: UpstreamServer, provider: str, graceful: bool
) -> None:
    upstream.inject(MODEL, Fault(kind=FaultKind.STREAM_CUT, after_chunks=3, graceful=graceful))
    failure = await _failure(build(_base(upstream, provider)), streamed=True)
    assert failure.kind is ErrorKind.STREAM_INCOMPLETE and failure.provider_request_id


async def test_a_stalled_stream_times_out(
    build: Build, upstream: UpstreamServer, provider: str
) -> None:
    upstream.inject(MODEL, Fault(kind=FaultKind.STREAM_STALL, after_chunks=2))
    failure = await _failure(build(_base(upstream, provider)), streamed=True)
    assert failure.kind is ErrorKind.TIMEOUT and failure.provider_request_id


@pytest.mark.parametrize("streamed", [True, False], ids=["stream", "complete"])
async def test_a_silent_server_times_out(
    build: Build, upstream: UpstreamServer, provider: str, streamed: bool
) -> None:
    upstream.inject(MODEL, Fault(kind=FaultKind.HANG))
    failure = await _failure(build(_base(upstream, provider)), streamed)
    assert failure.kind is ErrorKind.TIMEOUT


async def test_status_errors_keep_their_kind_and_the_next_call_reuses_the_client(
    build: Build, upstream: UpstreamServer, provider: str
) -> None:
    adapter = build(_base(upstream, provider))
    upstream.inject(MODEL, Fault(kind=FaultKind.RATE_LIMIT, retry_after=2, times=1))
    failure = await _failure(adapter, streamed=True)
    assert failure.kind is ErrorKind.RATE_LIMIT and failure.retry_after == 2
    events = await _drain(adapter)
    assert isinstance(events[0], Accepted) and isinstance(events[-1], Finish)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Echo: hello world"


async def _leaked_sessions(make: Callable[[], ProviderAdapter], close: bool) -> list[str]:
    """The ResourceWarnings aiohttp gives for a session or connector it finds unclosed
    ("Unclosed client session", "Unclosed connector") once an adapter, after one call, is
    dropped (closed first or not). Only this frame holds the adapter."""
    adapter = make()
    await _drain(adapter)
    # The stream's tail is read by a task of its own (providers/stream_tail.py), which holds
    # the response, and through it the session, until the body's end.
    await eventually(lambda: tails_being_read() == 0)
    if close:
        await adapter.aclose()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        del adapter
        gc.collect()
    texts = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    return [t for t in texts if t.startswith("Unclosed") and "aiohttp" in t]


async def test_an_adapter_closes_its_aiohttp_session(
    upstream: UpstreamServer, provider: str
) -> None:
    base = _base(upstream, provider)
    connection = Connection.model_validate({"api_key": "sk-transport-test", "base_url": base})
    default = OpenAIAdapter if provider == "openai" else AnthropicAdapter

    def aiohttp_adapter() -> ProviderAdapter:
        return _adapter(provider, "aiohttp", base)

    def default_adapter() -> ProviderAdapter:
        return default(model=MODEL, connection=connection, timeouts=TIMEOUTS)

    assert await _leaked_sessions(aiohttp_adapter, close=True) == []
    assert await _leaked_sessions(default_adapter, close=True) == []
    # The check sees a leak: an adapter dropped unclosed leaves its session behind, the
    # default adapter's too, as its transport is aiohttp's.
    assert await _leaked_sessions(aiohttp_adapter, close=False)
    assert await _leaked_sessions(default_adapter, close=False)
