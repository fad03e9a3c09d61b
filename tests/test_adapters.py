"""The adapters over the real SDKs and real HTTP, against the local upstream: normalised
events, usage (cached tokens included), request ids, and every fault classified once."""

from __future__ import annotations

import asyncio
import json
import logging
import pickle
import time
from collections.abc import AsyncIterator
from typing import TypeVar

import anthropic
import httpx2
import openai
import pytest

from domain.enums import Modality
from providers.anthropic_adapter import AnthropicAdapter
from providers.anthropic_errors import map_error as map_anthropic_error
from providers.base import ProviderAdapter
from providers.completion_fold import collect_events, collect_stream
from providers.errors import (
    ErrorKind,
    MalformedAnswer,
    ProviderError,
    clean_reason,
    retry_after_seconds,
)
from providers.openai_adapter import OpenAIAdapter, api_base_url
from providers.openai_adapter import map_error as map_openai_error
from providers.registry import build_adapter, resolve_adapter
from providers.rerank_adapter import RerankAdapter
from providers.secrets import Connection, UpstreamSecretBroker, default_broker
from providers.types import (
    Accepted,
    CallLimits,
    ChatRequest,
    Finish,
    FinishReason,
    KeepAlive,
    Message,
    ProviderTimeouts,
    ResponseFormat,
    StreamEvent,
    TextDelta,
    Tool,
    ToolCall,
    ToolCallDelta,
    ToolChoice,
    UsageEvent,
)
from providers.upstream import ChatTurn, Fault, FaultKind, Reply, ToolCallReply, UpstreamServer
from tests.conftest import free_port
from tests.helpers.deadline import UNBOUNDED
from tests.helpers.receiver import Receiver
from tests.helpers.schema_check import violations

MODEL = "sim-model"
PROVIDERS = ["local-upstream", "anthropic"]
TIMEOUTS = ProviderTimeouts(connect=2, read=5)
SHORT = ProviderTimeouts(connect=1, read=0.3)
SECRET_PROMPT = "the launch code is 0000-PLUTO"
HELLO = ChatRequest(
    messages=(
        Message(role="system", content="Be brief."),
        Message(role="user", content="hello world"),
    )
)
LOOKUP = Tool(
    name="lookup",
    description="Look something up",
    parameters={
        "type": "object",
        "properties": {"term": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}},
        "required": ["term", "limit"],
        "additionalProperties": False,
    },
)
CLOCK = Tool(name="clock", parameters={"type": "object", "properties": {}})


@pytest.fixture(scope="module")
async def upstream() -> AsyncIterator[UpstreamServer]:
    async with UpstreamServer() as server:
        yield server


@pytest.fixture(autouse=True)
def fresh(upstream: UpstreamServer) -> None:
    upstream.state.reset()
    upstream.state.responders.clear()
    upstream.state.settings.clear()


@pytest.fixture(scope="module")
async def connection(upstream: UpstreamServer) -> Connection:
    return await UpstreamSecretBroker().resolve(upstream.endpoint_ref)


# Adapters are long-lived and shared by concurrent calls in the router; so here, per module.
@pytest.fixture(scope="module", params=PROVIDERS)
async def adapter(
    request: pytest.FixtureRequest, connection: Connection
) -> AsyncIterator[ProviderAdapter]:
    async with build_adapter(request.param, MODEL, connection, timeouts=TIMEOUTS) as built:
        yield built


@pytest.fixture(scope="module", params=PROVIDERS)
async def impatient(
    request: pytest.FixtureRequest, connection: Connection
) -> AsyncIterator[ProviderAdapter]:
    async with build_adapter(request.param, MODEL, connection, timeouts=SHORT) as built:
        yield built


async def drain(adapter: ProviderAdapter, request: ChatRequest = HELLO) -> list[StreamEvent]:
    return [event async for event in adapter.stream(request)]


async def next_answer_event(stream: AsyncIterator[StreamEvent]) -> StreamEvent:
    """The stream's next event past its keep-alives (the simulator's Anthropic stream pings
    once after the first block starts, as Anthropic's does)."""
    while isinstance(event := await anext(stream), KeepAlive):
        pass
    return event


async def test_stream_yields_deltas_then_usage_then_finish(
    adapter: ProviderAdapter, upstream: UpstreamServer
) -> None:
    everything = await drain(adapter)
    # Anthropic's ping is a keep-alive (activities/resilience.timed_stream holds the idle bound
    # open on it); the OpenAI-protocol stream has none.
    keep_alives = [e for e in everything if isinstance(e, KeepAlive)]
    assert len(keep_alives) == (1 if adapter.provider == "anthropic" else 0)
    events = [e for e in everything if not isinstance(e, KeepAlive)]
    accepted, *deltas = events[:-2]
    assert isinstance(accepted, Accepted) and all(isinstance(e, TextDelta) for e in deltas)
    usage, finish = events[-2:]
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Echo: hello world"
    assert isinstance(usage, UsageEvent) and isinstance(finish, Finish)
    assert (usage.input_tokens, usage.output_tokens) == (5, 4)
    assert finish.reason is FinishReason.STOP
    (record,) = upstream.state.ledger
    assert finish.provider_request_id == accepted.provider_request_id == record.request_id
    assert finish.response_id is not None and finish.response_id.endswith(str(record.response_id))


async def test_complete_matches_the_folded_stream(adapter: ProviderAdapter) -> None:
    streamed = collect_events(await drain(adapter))
    completed = await adapter.complete(HELLO)
    assert completed.text == streamed.text == "Echo: hello world"
    assert completed.usage is not None and streamed.usage is not None
    assert completed.usage.input_tokens == streamed.usage.input_tokens
    assert completed.usage.output_tokens == streamed.usage.output_tokens
    assert completed.finish_reason is FinishReason.STOP
    assert completed.provider_request_id and completed.provider_request_id.startswith("req_")
    assert completed.provider_request_id != streamed.provider_request_id


def _two_calls(turn: ChatTurn) -> Reply:
    return Reply(
        tool_calls=[
            ToolCallReply(name="lookup", arguments={"term": "router", "limit": 3}),
            ToolCallReply(name="clock"),
        ]
    )


async def test_parallel_tool_calls_normalise_in_both_modes(
    adapter: ProviderAdapter, upstream: UpstreamServer
) -> None:
    upstream.register(MODEL, _two_calls)
    request = ChatRequest(messages=(Message(role="user", content="go"),), tools=(LOOKUP, CLOCK))
    events = await drain(adapter, request)
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    heads = [d for d in deltas if d.id is not None]
    assert [(d.index, d.name) for d in heads] == [(0, "lookup"), (1, "clock")]
    for completion in (collect_events(events), await adapter.complete(request)):
        assert completion.finish_reason is FinishReason.TOOL_CALLS
        assert [c.name for c in completion.tool_calls] == ["lookup", "clock"]
        assert json.loads(completion.tool_calls[0].arguments) == {"term": "router", "limit": 3}
        assert json.loads(completion.tool_calls[1].arguments or "{}") == {}
    single = request.model_copy(update={"parallel_tool_calls": False})
    assert len((await adapter.complete(single)).tool_calls) == 1


async def test_default_tool_call_arguments_satisfy_the_schema(adapter: ProviderAdapter) -> None:
    request = ChatRequest(
        messages=(Message(role="user", content="find"),),
        tools=(CLOCK, LOOKUP),
        tool_choice=ToolChoice(mode="tool", name="lookup"),
    )
    completion = await adapter.complete(request)
    (call,) = completion.tool_calls
    assert call.name == "lookup"
    assert violations(json.loads(call.arguments), LOOKUP.parameters) == []


async def test_request_mapping_reaches_the_provider(
    adapter: ProviderAdapter, upstream: UpstreamServer
) -> None:
    turns: list[ChatTurn] = []

    def record(turn: ChatTurn) -> Reply:
        turns.append(turn)
        return Reply(text='{"ok": true}')

    upstream.register(MODEL, record)
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    request = ChatRequest(
        messages=(
            Message(role="system", content="sys"),
            Message(role="user", content="look it up"),
            Message(
                role="assistant",
                tool_calls=(ToolCall(id="call_1", name="lookup", arguments='{"term":"x"}'),),
            ),
            Message(role="tool", tool_call_id="call_1", content="result text"),
            Message(role="user", content="now answer"),
        ),
        tools=(LOOKUP,),
        tool_choice=ToolChoice(mode="none"),
        response_format=ResponseFormat(type="json_schema", name="ok", json_schema=schema),
        max_tokens=50,
        temperature=0.2,
        stop=("STOP",),
    )
    completion = await adapter.complete(request)
    assert completion.text == '{"ok": true}'
    (turn,) = turns
    assert turn.system == "sys"
    assert [m.role for m in turn.messages] == ["user", "assistant", "tool", "user"]
    assert turn.messages[1].tool_calls[0].name == "lookup"
    assert turn.messages[2].tool_call_id == "call_1" and turn.messages[2].text == "result text"
    assert [t.name for t in turn.tools] == ["lookup"] and turn.tool_choice == "none"
    # Anthropic's structured outputs take only closed objects: the adapter closes them
    # (providers/anthropic_json_mode.py).
    sent = {**schema, "additionalProperties": False} if adapter.provider == "anthropic" else schema
    assert turn.response_format == "json_schema" and turn.json_schema == sent
    assert (turn.max_tokens, turn.stop) == (50, ["STOP"])


async def test_cached_tokens_are_normalised(adapter: ProviderAdapter) -> None:
    history = ChatRequest(
        messages=(
            Message(role="system", content="A stable system prompt for the agent."),
            Message(role="user", content="first"),
            Message(role="assistant", content="ok"),
            Message(role="user", content="second"),
        )
    )
    first = await adapter.complete(history)
    second = await adapter.complete(history)
    assert first.usage is not None and second.usage is not None
    assert first.usage.cached_input_tokens == 0
    assert second.usage.input_tokens == first.usage.input_tokens  # cached tokens included
    assert 0 < second.usage.cached_input_tokens <= second.usage.input_tokens
    if adapter.provider == "anthropic":
        assert first.usage.cache_write_input_tokens > 0  # breakpoints set by the adapter


async def test_embeddings_through_the_openai_adapter(
    connection: Connection, upstream: UpstreamServer
) -> None:
    upstream.state.configure("emb", embedding_dimensions=12)
    async with build_adapter("vllm", "emb", connection, timeouts=TIMEOUTS) as embedder:
        result = await embedder.embed(["one", "two words", "one"])
        wide = await embedder.embed(["one"], dimensions=24)
    assert [len(v) for v in result.vectors] == [12, 12, 12]
    assert result.vectors[0] == result.vectors[2] != result.vectors[1]
    assert result.input_tokens == 4
    assert result.provider_request_id and result.provider_request_id.startswith("req_")
    assert len(wide.vectors[0]) == 24
    async with build_adapter("anthropic", "claude", connection, timeouts=TIMEOUTS) as claude:
        with pytest.raises(ProviderError) as caught:
            await claude.embed(["x"])
    assert caught.value.kind is ErrorKind.UNSUPPORTED and not caught.value.transient


@pytest.mark.parametrize("suffix", ["", "/v1"])
async def test_rerank_adapter(upstream: UpstreamServer, suffix: str) -> None:
    connection = Connection(api_key="k", base_url=upstream.base_url + suffix)
    documents = ["quarterly revenue", "router retries and timeouts", "timeouts in routers"]
    async with build_adapter("tei", "rr", connection, timeouts=TIMEOUTS) as reranker:
        assert isinstance(reranker, RerankAdapter)
        result = await reranker.rerank("router timeouts", documents, top_n=2)
    assert [r.index for r in result.results] == [1, 2]
    assert result.results[0].relevance_score >= result.results[1].relevance_score
    assert result.input_tokens and result.search_units == 1
    assert result.provider_request_id and result.provider_request_id.startswith("req_")
    assert upstream.requests("rr", "rerank") == 1


GATE_FAULTS = [
    (Fault(kind=FaultKind.RATE_LIMIT, retry_after=2), ErrorKind.RATE_LIMIT, 2.0),
    (Fault(kind=FaultKind.RATE_LIMIT), ErrorKind.RATE_LIMIT, None),
    (Fault(kind=FaultKind.SERVER_ERROR), ErrorKind.SERVER, None),
    (Fault(kind=FaultKind.UNAVAILABLE), ErrorKind.SERVER, None),
    (Fault(kind=FaultKind.OVERLOADED), ErrorKind.OVERLOADED, None),
    (Fault(kind=FaultKind.CONTEXT_LENGTH), ErrorKind.CONTEXT_LENGTH, None),
    (Fault(kind=FaultKind.CONTENT_POLICY), ErrorKind.CONTENT_POLICY, None),
    (Fault(kind=FaultKind.AUTH), ErrorKind.AUTH, None),
]


@pytest.mark.parametrize("streamed", [True, False], ids=["stream", "complete"])
@pytest.mark.parametrize(("fault", "kind", "retry_after"), GATE_FAULTS, ids=lambda v: str(v))
async def test_gate_faults_are_classified(
    adapter: ProviderAdapter,
    upstream: UpstreamServer,
    fault: Fault,
    kind: ErrorKind,
    retry_after: float | None,
    streamed: bool,
) -> None:
    upstream.inject(MODEL, fault.model_copy(update={"times": 1}))
    secret = ChatRequest(messages=(Message(role="user", content=SECRET_PROMPT),))
    with pytest.raises(ProviderError) as caught:
        if streamed:
            await drain(adapter, secret)
        else:
            await adapter.complete(secret)
    error = caught.value
    assert error.kind is kind
    assert error.transient is kind.transient
    assert error.retry_after == retry_after
    assert error.status_code is not None and error.status_code >= 400
    assert error.provider_request_id and error.provider_request_id.startswith("req_")
    assert "PLUTO" not in str(error) and "PLUTO" not in repr(error.__dict__)
    assert error.__cause__ is None and error.__suppress_context__
    assert (await adapter.complete(HELLO)).text  # healthy again: the fault applied once
    assert upstream.requests(MODEL) == 2


@pytest.mark.parametrize("streamed", [True, False], ids=["stream", "complete"])
async def test_a_redirect_is_not_followed(
    adapter: ProviderAdapter, upstream: UpstreamServer, streamed: bool
) -> None:
    """The SDKs' clients follow redirects: a 307 from a hostile or moved endpoint re-sent the
    prompt to wherever it named (an internal address, the cloud's metadata service), and that
    answer's words came back to the caller. Not followed, it is the provider's fault."""
    canary = Receiver(port=free_port(), failing=True, failing_status=200)
    await canary.start()
    try:
        upstream.inject(MODEL, Fault(kind=FaultKind.REDIRECT, location=canary.url, times=1))
        secret = ChatRequest(messages=(Message(role="user", content=SECRET_PROMPT),))
        with pytest.raises(ProviderError) as caught:
            if streamed:
                await drain(adapter, secret)
            else:
                await adapter.complete(secret)
    finally:
        await canary.stop()
    assert caught.value.kind is ErrorKind.NOT_FOUND and not caught.value.transient
    assert canary.refused_while_failing == 0  # nothing reached where it pointed
    assert upstream.requests(MODEL) == 1


async def test_server_error_twice_then_healthy(
    adapter: ProviderAdapter, upstream: UpstreamServer
) -> None:
    upstream.inject(MODEL, Fault(kind=FaultKind.SERVER_ERROR, times=2))
    kinds = []
    for _ in range(3):
        try:
            await adapter.complete(HELLO)
            kinds.append("ok")
        except ProviderError as exc:
            kinds.append(exc.kind.value)
    assert kinds == ["server_error", "server_error", "ok"]
    assert upstream.requests(MODEL) == 3


E = TypeVar("E", bound=Exception)


async def _faulted_after_output(
    adapter: ProviderAdapter, upstream: UpstreamServer, kind: FaultKind, raises: type[E]
) -> tuple[list[StreamEvent], pytest.ExceptionInfo[E]]:
    """The events the adapter gave before `kind` struck, just after the first output (OpenAI:
    role chunk, "Echo:"; Anthropic: message_start, block start, ping, "Echo:"), keep-alives
    left out, and what it raised."""
    after = 2 if adapter.provider != "anthropic" else 4
    upstream.inject(MODEL, Fault(kind=kind, after_chunks=after))
    received: list[StreamEvent] = []
    with pytest.raises(raises) as caught:
        async for event in adapter.stream(HELLO):
            if not isinstance(event, KeepAlive):
                received.append(event)
    return received, caught


async def test_a_connection_dropped_mid_answer_is_a_transient_incomplete_stream(
    adapter: ProviderAdapter, upstream: UpstreamServer
) -> None:
    received, caught = await _faulted_after_output(
        adapter, upstream, FaultKind.STREAM_CUT, ProviderError
    )
    # The stream was cut, not a connection refused: and its headers had named the request.
    assert caught.value.kind is ErrorKind.STREAM_INCOMPLETE and caught.value.transient
    assert caught.value.provider_request_id
    # The request id came with the headers, before any output; then output reached the caller.
    request_id = caught.value.provider_request_id
    assert received == [Accepted(provider_request_id=request_id), TextDelta(text="Echo:")]


async def test_an_error_event_inside_the_stream_is_classified_and_keeps_the_request_id(
    adapter: ProviderAdapter, upstream: UpstreamServer
) -> None:
    # The lean reader sees the protocol's own error event after output (Anthropic's
    # `event: error` overloaded_error, OpenAI's chunk carrying `error`) and maps it as the SDK
    # maps a status error: by the error's type.
    received, caught = await _faulted_after_output(
        adapter, upstream, FaultKind.STREAM_ERROR, ProviderError
    )
    wanted = ErrorKind.OVERLOADED if adapter.provider == "anthropic" else ErrorKind.SERVER
    assert caught.value.kind is wanted and caught.value.transient
    request_id = caught.value.provider_request_id
    assert request_id
    assert received == [Accepted(provider_request_id=request_id), TextDelta(text="Echo:")]


async def test_a_garbled_event_ends_the_stream_without_a_finish(
    adapter: ProviderAdapter, upstream: UpstreamServer
) -> None:
    # Data that is not JSON after output: the reader raises (the attempt's wrapper turns it
    # into stream_incomplete, tests/test_provider_request_id.py), never skips it and finishes.
    received, _ = await _faulted_after_output(
        adapter, upstream, FaultKind.MALFORMED_CHUNK, ValueError
    )
    assert not any(isinstance(e, Finish | UsageEvent) for e in received)
    assert TextDelta(text="Echo:") in received


async def test_graceful_cut_is_an_incomplete_stream(
    adapter: ProviderAdapter, upstream: UpstreamServer
) -> None:
    upstream.inject(MODEL, Fault(kind=FaultKind.STREAM_CUT, after_chunks=3, graceful=True))
    with pytest.raises(ProviderError) as caught:
        await drain(adapter)
    assert caught.value.kind is ErrorKind.STREAM_INCOMPLETE and caught.value.transient
    assert caught.value.provider_request_id


async def test_stall_times_out_within_the_read_timeout(
    impatient: ProviderAdapter, upstream: UpstreamServer
) -> None:
    upstream.inject(MODEL, Fault(kind=FaultKind.STREAM_STALL, after_chunks=2))
    started = time.monotonic()
    with pytest.raises(ProviderError) as caught:
        await drain(impatient)
    assert caught.value.kind is ErrorKind.TIMEOUT and caught.value.transient
    assert 0.25 < time.monotonic() - started < UNBOUNDED


@pytest.mark.parametrize("streamed", [True, False], ids=["stream", "complete"])
async def test_hang_times_out(
    impatient: ProviderAdapter, upstream: UpstreamServer, streamed: bool
) -> None:
    upstream.inject(MODEL, Fault(kind=FaultKind.HANG))
    started = time.monotonic()
    with pytest.raises(ProviderError) as caught:
        await (drain(impatient) if streamed else impatient.complete(HELLO))
    assert caught.value.kind is ErrorKind.TIMEOUT
    assert 0.25 < time.monotonic() - started < UNBOUNDED
    assert upstream.requests(MODEL) == 1
    assert [r.status for r in upstream.state.ledger] == [0]  # never answered


@pytest.mark.parametrize("streamed", [True, False], ids=["stream", "complete"])
async def test_a_calls_own_limits_bound_the_first_byte_and_leave_answers_whole(
    adapter: ProviderAdapter, upstream: UpstreamServer, streamed: bool
) -> None:
    # Tighter than the adapter's 5 s read timeout: the call's own bound ends a silent provider.
    limits = CallLimits(connect=1, first_byte=0.3)
    whole = await (
        collect_stream(adapter.stream(HELLO, limits=limits))
        if streamed
        else adapter.complete(HELLO, limits=limits)
    )
    assert whole.finish_reason is FinishReason.STOP and whole.text
    upstream.inject(MODEL, Fault(kind=FaultKind.HANG))
    started = time.monotonic()
    with pytest.raises(ProviderError) as caught:
        await (
            collect_stream(adapter.stream(HELLO, limits=limits))
            if streamed
            else adapter.complete(HELLO, limits=limits)
        )
    assert caught.value.kind is ErrorKind.TIMEOUT and caught.value.reason == "first byte timeout"
    assert 0.25 < time.monotonic() - started < UNBOUNDED


async def test_slow_first_token_beyond_the_read_timeout(
    impatient: ProviderAdapter, upstream: UpstreamServer
) -> None:
    upstream.inject(MODEL, Fault(kind=FaultKind.SLOW_FIRST_TOKEN, delay=0.5, times=1))
    with pytest.raises(ProviderError) as caught:
        await drain(impatient)
    assert caught.value.kind is ErrorKind.TIMEOUT


async def test_slow_first_token_within_the_read_timeout(
    adapter: ProviderAdapter, upstream: UpstreamServer
) -> None:
    upstream.inject(MODEL, Fault(kind=FaultKind.SLOW_FIRST_TOKEN, delay=0.2, times=1))
    started = time.monotonic()
    stream = adapter.stream(HELLO)
    assert isinstance(await anext(stream), Accepted)  # the headers come at once
    first = await next_answer_event(stream)
    first_token = time.monotonic() - started
    rest = [event async for event in stream]
    assert isinstance(first, TextDelta) and isinstance(rest[-1], Finish)
    assert first_token >= 0.2


async def test_missing_terminator_keeps_the_complete_answer(
    adapter: ProviderAdapter, upstream: UpstreamServer
) -> None:
    upstream.inject(MODEL, Fault(kind=FaultKind.MISSING_TERMINATOR, times=1))
    completion = collect_events(await drain(adapter))
    assert completion.text == "Echo: hello world" and completion.usage is not None


@pytest.mark.parametrize("streamed", [True, False], ids=["stream", "complete"])
async def test_no_usage_means_no_usage_event(
    adapter: ProviderAdapter, upstream: UpstreamServer, streamed: bool
) -> None:
    upstream.inject(MODEL, Fault(kind=FaultKind.NO_USAGE, times=1))
    if streamed:
        events = await drain(adapter)
        assert not any(isinstance(e, UsageEvent) for e in events)
        completion = collect_events(events)
    else:
        completion = await adapter.complete(HELLO)
    assert completion.usage is None and completion.text == "Echo: hello world"


async def test_keep_alives_after_the_finish_do_not_hold_the_answer(
    adapter: ProviderAdapter, upstream: UpstreamServer
) -> None:
    # The finish is in; then no usage, no terminator, and a minute of keep-alives. The OpenAI
    # adapter waits FINISH_GRACE_SECONDS for the usage chunk, counted from the finish: were it
    # counted from each keep-alive, the answer would be held the whole minute.
    for kind in (FaultKind.NO_USAGE, FaultKind.MISSING_TERMINATOR):
        upstream.inject(MODEL, Fault(kind=kind, times=1))
    upstream.inject(
        MODEL, Fault(kind=FaultKind.KEEP_ALIVE, after_chunks=100, delay=60, interval=0.2, times=1)
    )
    events = await asyncio.wait_for(drain(adapter), timeout=20)
    assert isinstance(events[-1], Finish)
    assert collect_events(events).text == "Echo: hello world"


async def test_closing_a_stream_early_releases_it(
    adapter: ProviderAdapter, upstream: UpstreamServer
) -> None:
    stream = adapter.stream(HELLO)
    assert isinstance(await anext(stream), Accepted)
    assert isinstance(await next_answer_event(stream), TextDelta)
    await stream.aclose()
    assert (await adapter.complete(HELLO)).text == "Echo: hello world"
    assert upstream.requests(MODEL) == 2


async def test_sdk_debug_logs_carry_no_prompt(
    adapter: ProviderAdapter, upstream: UpstreamServer, caplog: pytest.LogCaptureFixture
) -> None:
    secret = ChatRequest(messages=(Message(role="user", content=SECRET_PROMPT),))
    with caplog.at_level(logging.DEBUG):
        await adapter.complete(secret)
        await drain(adapter, secret)
        upstream.inject(MODEL, Fault(kind=FaultKind.CONTENT_POLICY, times=1))
        with pytest.raises(ProviderError):
            await adapter.complete(secret)
    assert caplog.records  # the SDKs did log at debug level
    assert not [r for r in caplog.records if "PLUTO" in r.getMessage()]


async def test_registry_picks_adapters_and_refuses_unknowns(connection: Connection) -> None:
    cases = {
        "openai": OpenAIAdapter,
        "vllm": OpenAIAdapter,
        "ollama": OpenAIAdapter,
        "llamacpp": OpenAIAdapter,
        "openai-compatible": OpenAIAdapter,
        "local-upstream": OpenAIAdapter,
        "anthropic": AnthropicAdapter,
        "jina": RerankAdapter,
    }
    for provider, cls in cases.items():
        built = build_adapter(provider, "m", connection, timeouts=TIMEOUTS)
        assert type(built) is cls, provider
        await built.aclose()
    rerank = build_adapter("vllm", "m", connection, timeouts=TIMEOUTS, modality=Modality.RERANK)
    assert isinstance(rerank, RerankAdapter)
    await rerank.aclose()
    with pytest.raises(ProviderError) as unknown:
        build_adapter("mystery", "m", connection, timeouts=TIMEOUTS)
    assert unknown.value.kind is ErrorKind.UNSUPPORTED
    keyless = Connection(api_key="k")
    with pytest.raises(ProviderError) as no_url:
        build_adapter("vllm", "m", keyless, timeouts=TIMEOUTS)
    assert no_url.value.kind is ErrorKind.INVALID_REQUEST
    assert api_base_url("http://vllm:8000") == "http://vllm:8000/v1"
    assert api_base_url("http://vllm:8000/") == "http://vllm:8000/v1"
    assert api_base_url("https://gw.example/openai/v1/") == "https://gw.example/openai/v1"
    assert api_base_url(None) == "https://api.openai.com/v1"


async def test_resolve_adapter_from_an_endpoint_ref(upstream: UpstreamServer) -> None:
    broker = default_broker(allow_upstream=True)
    adapter = await resolve_adapter(
        broker,
        provider="anthropic",
        model=MODEL,
        endpoint_ref=upstream.endpoint_ref,
        timeouts=TIMEOUTS,
    )
    async with adapter:
        assert (await adapter.complete(HELLO)).text == "Echo: hello world"


def test_errors_pickle_and_scrub_credentials() -> None:
    error = ProviderError(
        ErrorKind.RATE_LIMIT,
        provider="openai",
        status_code=429,
        code="rate_limit_exceeded",
        reason="Incorrect API key provided: sk-abc123456789xyz. " + "x" * 400,
        retry_after=1.5,
        provider_request_id="req_1",
    )
    assert "sk-abc" not in str(error) and "[redacted]" in str(error)
    assert error.reason is not None and len(error.reason) <= 300
    clone = pickle.loads(pickle.dumps(error))
    assert (clone.kind, clone.retry_after, clone.reason) == (error.kind, 1.5, error.reason)
    assert clean_reason("Bearer abc.def") == "[redacted]"
    # Other providers' keys, as their 401s echo them, and key=value pairs.
    for key in ("gsk_abcdEFGH1234", "AIzaSyD-abc12345", "xai-abcd1234efgh", "api_key=abcd1234"):
        assert (
            clean_reason(f"Invalid credentials {key} given")
            == "Invalid credentials [redacted] given"
        )
    # Words that only look like them stay.
    assert clean_reason("max_token=4096 is too large") == "max_token=4096 is too large"
    assert retry_after_seconds({"retry-after-ms": "1500"}) == 1.5
    assert retry_after_seconds({"retry-after": "7"}) == 7.0
    assert retry_after_seconds({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0
    assert retry_after_seconds({}) is None
    # Values that name no time are no Retry-After; a Retry-After-Ms that names none leaves
    # the Retry-After beside it to say.
    for text in ("inf", "-inf", "1e400", "nan", "soon"):
        assert retry_after_seconds({"retry-after": text}) is None
        assert retry_after_seconds({"retry-after-ms": text, "retry-after": "2"}) == 2.0


def test_errors_inside_streams_are_classified_by_their_type() -> None:
    response = httpx2.Response(200, request=httpx2.Request("POST", "http://upstream/v1/messages"))
    overloaded = anthropic.APIStatusError(
        "Overloaded",
        response=response,
        body={"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
    )
    assert map_anthropic_error(overloaded, "anthropic").kind is ErrorKind.OVERLOADED
    request = httpx2.Request("POST", "http://upstream/v1/chat/completions")
    in_stream = openai.APIError(
        "boom", request, body={"message": "The server had an error", "type": "server_error"}
    )
    assert map_openai_error(in_stream, "openai").kind is ErrorKind.SERVER
    too_long = openai.APIError(
        "x", request, body={"message": "too long", "code": "context_length_exceeded"}
    )
    assert map_openai_error(too_long, "openai").kind is ErrorKind.CONTEXT_LENGTH


async def test_a_whole_answer_the_sdk_took_unvalidated_is_malformed_and_quotes_nothing(
    upstream: UpstreamServer, connection: Connection
) -> None:
    """Chat Completions' content as a list of parts: the SDK parses it without validating, and
    reading it raised pydantic's ValidationError, which quotes the answer. Evaluations and
    probes read answers whole, and that message reached their histories, spans and the
    evaluation's stored reason. It is the provider's malformed answer, in our own words."""
    upstream.register(MODEL, lambda turn: Reply(text=SECRET_PROMPT))
    upstream.inject(MODEL, Fault(kind=FaultKind.MALFORMED_ANSWER, endpoint="chat.completions"))
    async with build_adapter("openai", MODEL, connection, timeouts=TIMEOUTS) as adapter:
        with pytest.raises(ProviderError) as caught:
            await adapter.complete(HELLO)
    error = caught.value
    assert error.kind is ErrorKind.SERVER and error.transient
    assert "malformed" in str(error)
    assert "PLUTO" not in str(error) and "PLUTO" not in repr(error.__dict__)
    assert error.__cause__ is None and error.__suppress_context__


async def test_a_reranker_that_ignores_top_n_is_cut_to_it(upstream: UpstreamServer) -> None:
    """TEI has no top_n: it answered every document, and so did the call asking for two."""
    connection = Connection(api_key="k", base_url=upstream.base_url)
    documents = ["quarterly revenue", "router retries and timeouts", "timeouts in routers"]
    upstream.inject("rr-all", Fault(kind=FaultKind.MALFORMED_ANSWER, flaw="untrimmed", times=1))
    async with build_adapter("tei", "rr-all", connection, timeouts=TIMEOUTS) as reranker:
        result = await reranker.rerank("router timeouts", documents, top_n=2)
    assert [r.index for r in result.results] == [1, 2]


def test_a_rerank_result_naming_a_document_by_text_is_told_by_its_type() -> None:
    """The reason reaches the caller and, before this, the workflow's history: a text `index`
    is the answer's words, so only its type is named."""
    from providers.rerank_adapter import _items  # the answer's reading, alone

    with pytest.raises(MalformedAnswer) as caught:
        _items({"results": [{"index": "the launch code is PLUTO", "relevance_score": 1.0}]}, 3)
    assert "PLUTO" not in str(caught.value) and "of type str" in str(caught.value)


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (400, "the request exceeds the available context size, try increasing it"),
        (422, "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096"),
    ],
    ids=["llama.cpp", "tgi"],
)
def test_self_hosted_servers_context_overflows_are_context_length(
    status: int, message: str
) -> None:
    """Read as invalid requests, these ended an evaluation whose long-context case overflowed
    the server's window as a refusal of the whole suite, not that case failed."""
    from providers.errors import kind_from_status

    assert kind_from_status(status, None, message) is ErrorKind.CONTEXT_LENGTH
