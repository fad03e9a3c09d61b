"""The local upstream speaks Anthropic's messages protocol well enough for the real anthropic
SDK: the streamed event sequence, tool_use, system, prompt-cache usage, errors."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx
import httpx2
import pytest

from providers.upstream import ChatTurn, Fault, FaultKind, Reply, ToolCallReply, UpstreamServer
from tests.helpers.deadline import UNBOUNDED
from tests.helpers.schema_check import violations

SEARCH: Any = {
    "name": "search",
    "description": "Search the docs",
    "input_schema": {
        "type": "object",
        "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}},
        "required": ["query", "limit"],
    },
}
OPEN: Any = {
    "name": "open_file",
    "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
}
USER: Any = [{"role": "user", "content": "hello there"}]


@pytest.fixture(scope="module")
async def upstream() -> AsyncIterator[UpstreamServer]:
    async with UpstreamServer() as server:
        yield server


@pytest.fixture(autouse=True)
def fresh(upstream: UpstreamServer) -> None:
    upstream.state.reset()
    upstream.state.responders.clear()
    upstream.state.settings.clear()


@pytest.fixture
async def client(upstream: UpstreamServer) -> AsyncIterator[anthropic.AsyncAnthropic]:
    sdk = anthropic.AsyncAnthropic(
        base_url=upstream.base_url, api_key="test-key", max_retries=0, timeout=5
    )
    yield sdk
    await sdk.close()


async def test_non_stream_message_with_system(client: anthropic.AsyncAnthropic) -> None:
    raw = await client.messages.with_raw_response.create(
        model="claude-sim", max_tokens=100, system="Be terse.", messages=USER
    )
    message = await raw.parse()
    assert raw.headers["request-id"].startswith("req_")
    assert message.id.startswith("msg_") and message.role == "assistant"
    assert message.stop_reason == "end_turn"
    assert [b.type for b in message.content] == ["text"]
    assert message.content[0].type == "text" and message.content[0].text == "Echo: hello there"
    assert message.usage.input_tokens == 5  # "Be", "terse", "." and "hello", "there"
    assert message.usage.output_tokens == 4
    assert message.usage.cache_read_input_tokens == 0


async def test_stream_event_sequence_on_the_wire(upstream: UpstreamServer) -> None:
    body = {"model": "claude-sim", "max_tokens": 50, "messages": USER, "stream": True}
    headers = {"x-api-key": "k", "anthropic-version": "2023-06-01"}
    async with httpx.AsyncClient(base_url=upstream.base_url) as http:
        resp = await http.post("/v1/messages", json=body, headers=headers)
    assert resp.headers["request-id"].startswith("req_")
    events = [
        line[len("event: ") :] for line in resp.text.splitlines() if line.startswith("event: ")
    ]
    assert events[:3] == ["message_start", "content_block_start", "ping"]
    assert set(events[3:-3]) == {"content_block_delta"}
    assert events[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    datas = [json.loads(line[6:]) for line in resp.text.splitlines() if line.startswith("data: ")]
    assert [d["type"] for d in datas] == events
    delta = next(d for d in datas if d["type"] == "message_delta")
    assert delta["delta"]["stop_reason"] == "end_turn" and delta["usage"]["output_tokens"] == 4


async def test_sdk_stream_text_and_usage(client: anthropic.AsyncAnthropic) -> None:
    stream: Any = await client.messages.create(
        model="claude-sim", max_tokens=50, messages=USER, stream=True
    )
    text = ""
    input_tokens = output_tokens = None
    async for event in stream:
        if event.type == "message_start":
            input_tokens = event.message.usage.input_tokens
        elif event.type == "content_block_delta" and event.delta.type == "text_delta":
            text += event.delta.text
        elif event.type == "message_delta":
            output_tokens = event.usage.output_tokens
    assert (text, input_tokens, output_tokens) == ("Echo: hello there", 2, 4)


async def test_tool_use_streams_input_json_deltas(client: anthropic.AsyncAnthropic) -> None:
    stream: Any = await client.messages.create(
        model="claude-sim",
        max_tokens=100,
        messages=USER,
        tools=[SEARCH, OPEN],
        tool_choice={"type": "any"},
        stream=True,
    )
    blocks: dict[int, dict[str, str]] = {}
    stop_reason = None
    async for event in stream:
        if event.type == "content_block_start" and event.content_block.type == "tool_use":
            blocks[event.index] = {"name": event.content_block.name, "json": ""}
        elif event.type == "content_block_delta" and event.delta.type == "input_json_delta":
            blocks[event.index]["json"] += event.delta.partial_json
        elif event.type == "message_delta":
            stop_reason = event.delta.stop_reason
    assert stop_reason == "tool_use"
    (block,) = blocks.values()
    assert block["name"] == "search"
    assert violations(json.loads(block["json"]), SEARCH["input_schema"]) == []


def _two_tools(turn: ChatTurn) -> Reply:
    return Reply(
        text="Looking.",
        tool_calls=[
            ToolCallReply(name="search", arguments={"query": "a", "limit": 1}),
            ToolCallReply(name="open_file", arguments={"path": "/x"}),
        ],
    )


async def test_parallel_tool_use_and_disable_parallel(
    client: anthropic.AsyncAnthropic, upstream: UpstreamServer
) -> None:
    upstream.register("claude-par", _two_tools)
    both = await client.messages.create(
        model="claude-par",
        max_tokens=100,
        messages=USER,
        tools=[SEARCH, OPEN],
    )
    assert [b.type for b in both.content] == ["text", "tool_use", "tool_use"]
    uses = [b for b in both.content if b.type == "tool_use"]
    assert [u.input for u in uses] == [{"query": "a", "limit": 1}, {"path": "/x"}]
    assert all(u.id.startswith("toolu_") for u in uses)
    one = await client.messages.create(
        model="claude-par",
        max_tokens=100,
        messages=USER,
        tools=[SEARCH, OPEN],
        tool_choice={"type": "auto", "disable_parallel_tool_use": True},
    )
    assert [b.type for b in one.content] == ["text", "tool_use"]


async def test_tool_results_reach_the_responder(
    client: anthropic.AsyncAnthropic, upstream: UpstreamServer
) -> None:
    turns: list[ChatTurn] = []

    def record(turn: ChatTurn) -> Reply:
        turns.append(turn)
        return Reply(text="done")

    upstream.register("claude-turns", record)
    await client.messages.create(
        model="claude-turns",
        max_tokens=100,
        system=[{"type": "text", "text": "sys"}],
        tools=[SEARCH],
        messages=[
            {"role": "user", "content": "find it"},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {"query": "q"}}
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "found"}],
            },
        ],
    )
    (turn,) = turns
    assert turn.api == "anthropic" and turn.system == "sys"
    assert [m.role for m in turn.messages] == ["user", "assistant", "tool"]
    assert turn.messages[1].tool_calls[0].arguments == {"query": "q"}
    assert (turn.messages[2].tool_call_id, turn.messages[2].text) == ("toolu_1", "found")


async def test_cache_control_reports_creation_then_read(client: anthropic.AsyncAnthropic) -> None:
    system: Any = [
        {
            "type": "text",
            "text": "A long and stable system prompt about the codebase.",
            "cache_control": {"type": "ephemeral"},
        }
    ]
    history: Any = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "answer"},
        {"role": "user", "content": "second"},
    ]
    first = await client.messages.create(
        model="claude-cache",
        max_tokens=10,
        system=system,
        messages=history,
    )
    again = await client.messages.create(
        model="claude-cache",
        max_tokens=10,
        system=system,
        messages=history,
    )
    system_and_history = 10 + 1 + 1  # the system text, "first", "answer"
    assert first.usage.cache_creation_input_tokens == system_and_history
    assert first.usage.cache_read_input_tokens == 0
    assert again.usage.cache_read_input_tokens == system_and_history + 1  # the whole prompt
    assert again.usage.cache_creation_input_tokens == 0
    # input_tokens leaves out what the cache served, as Anthropic's does
    assert again.usage.input_tokens == 0
    plain = await client.messages.create(model="claude-cache", max_tokens=10, messages=history)
    assert plain.usage.cache_read_input_tokens == 0 and plain.usage.cache_creation_input_tokens == 0


async def test_output_config_json_schema(client: anthropic.AsyncAnthropic) -> None:
    schema = {
        "type": "object",
        "properties": {"title": {"type": "string"}, "score": {"type": "integer"}},
        "required": ["title", "score"],
        "additionalProperties": False,
    }
    message = await client.messages.create(
        model="claude-sim",
        max_tokens=100,
        messages=USER,
        output_config={"format": {"type": "json_schema", "schema": schema}},
    )
    assert message.content[0].type == "text"
    assert violations(json.loads(message.content[0].text), schema) == []


async def test_max_tokens_and_stop_sequences(
    client: anthropic.AsyncAnthropic, upstream: UpstreamServer
) -> None:
    upstream.register("claude-long", lambda turn: Reply(text="alpha beta gamma delta"))
    short = await client.messages.create(model="claude-long", max_tokens=2, messages=USER)
    assert short.stop_reason == "max_tokens"
    assert short.content[0].type == "text" and short.content[0].text == "alpha beta"
    stopped = await client.messages.create(
        model="claude-long", max_tokens=50, messages=USER, stop_sequences=["gamma"]
    )
    assert (stopped.stop_reason, stopped.stop_sequence) == ("stop_sequence", "gamma")


@pytest.mark.parametrize(
    ("kind", "status", "error_type", "error_class"),
    [
        (FaultKind.OVERLOADED, 529, "overloaded_error", anthropic.InternalServerError),
        (FaultKind.RATE_LIMIT, 429, "rate_limit_error", anthropic.RateLimitError),
        (FaultKind.SERVER_ERROR, 500, "api_error", anthropic.InternalServerError),
        (FaultKind.UNAVAILABLE, 503, "api_error", anthropic.InternalServerError),
        (FaultKind.AUTH, 401, "authentication_error", anthropic.AuthenticationError),
        (FaultKind.CONTEXT_LENGTH, 400, "invalid_request_error", anthropic.BadRequestError),
        (FaultKind.CONTENT_POLICY, 400, "invalid_request_error", anthropic.BadRequestError),
    ],
)
async def test_faults_use_anthropic_error_shapes(
    client: anthropic.AsyncAnthropic,
    upstream: UpstreamServer,
    kind: FaultKind,
    status: int,
    error_type: str,
    error_class: type[anthropic.APIStatusError],
) -> None:
    upstream.inject("claude-err", Fault(kind=kind, times=1))
    with pytest.raises(error_class) as caught:
        await client.messages.create(model="claude-err", max_tokens=10, messages=USER)
    assert caught.value.status_code == status
    assert caught.value.type == error_type
    assert caught.value.request_id and caught.value.request_id.startswith("req_")
    if kind is FaultKind.CONTEXT_LENGTH:
        assert (caught.value.api_message or "").startswith("prompt is too long")
    await client.messages.create(model="claude-err", max_tokens=10, messages=USER)
    assert upstream.requests("claude-err", "messages") == 2


async def test_stall_keeps_the_connection_silent_until_the_client_gives_up(
    upstream: UpstreamServer,
) -> None:
    upstream.inject("claude-stall", Fault(kind=FaultKind.STREAM_STALL, after_chunks=3))
    sdk = anthropic.AsyncAnthropic(
        base_url=upstream.base_url, api_key="k", max_retries=0, timeout=0.4
    )
    types: list[str] = []
    started = time.monotonic()
    # The SDK lets read errors inside a stream through unwrapped; the adapter maps them.
    with pytest.raises(httpx2.ReadTimeout):
        stream: Any = await sdk.messages.create(
            model="claude-stall", max_tokens=10, messages=USER, stream=True
        )
        async for event in stream:
            types.append(event.type)
    assert types == ["message_start", "content_block_start"]  # the ping is swallowed
    assert 0.35 < time.monotonic() - started < UNBOUNDED
    await sdk.close()


async def test_models_list_in_anthropic_shape(
    client: anthropic.AsyncAnthropic, upstream: UpstreamServer
) -> None:
    upstream.register("claude-listed", lambda turn: Reply(text="x"))
    ids = [m.id async for m in client.models.list()]
    assert "claude-listed" in ids


async def test_missing_max_tokens_is_a_400(upstream: UpstreamServer) -> None:
    async with httpx.AsyncClient(base_url=upstream.base_url) as http:
        resp = await http.post(
            "/v1/messages",
            json={"model": "claude-sim", "messages": USER},
            headers={"x-api-key": "k"},
        )
    assert resp.status_code == 400
    assert resp.json()["error"] == {
        "type": "invalid_request_error",
        "message": "max_tokens: Field required",
    }
