"""The local upstream speaks OpenAI's wire protocol well enough for the real openai SDK:
chat (stream and not), tools, structured output, embeddings, models, rerank, faults, counters."""

from __future__ import annotations

import base64
import json
import struct
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest

from providers.upstream import (
    ChatTurn,
    Fault,
    FaultKind,
    Reply,
    ScriptedResponder,
    ToolCallReply,
    UpstreamServer,
)
from tests.helpers.deadline import UNBOUNDED
from tests.helpers.schema_check import violations

WEATHER: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["c", "f"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "required": ["city", "unit", "days"],
            "additionalProperties": False,
        },
    },
}
TIME: Any = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}},
    },
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
async def client(upstream: UpstreamServer) -> AsyncIterator[openai.AsyncOpenAI]:
    sdk = openai.AsyncOpenAI(
        base_url=upstream.openai_base_url, api_key="test-key", max_retries=0, timeout=5
    )
    yield sdk
    await sdk.close()


async def test_non_stream_answer_has_ids_and_usage(client: openai.AsyncOpenAI) -> None:
    raw = await client.chat.completions.with_raw_response.create(model="gpt-sim", messages=USER)
    completion = raw.parse()
    assert raw.headers["x-request-id"].startswith("req_")
    assert completion.id.startswith("chatcmpl-")
    assert completion.choices[0].message.content == "Echo: hello there"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (2, 4)
    assert completion.usage.prompt_tokens_details is not None
    assert completion.usage.prompt_tokens_details.cached_tokens == 0


async def test_stream_sends_chunks_final_usage_and_done(
    client: openai.AsyncOpenAI, upstream: UpstreamServer
) -> None:
    stream: Any = await client.chat.completions.create(
        model="gpt-sim", messages=USER, stream=True, stream_options={"include_usage": True}
    )
    chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Echo: hello there"
    assert len({c.id for c in chunks}) == 1
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "stop" and all(f is None for f in finishes[:-1])
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 4

    async with httpx.AsyncClient(base_url=upstream.openai_base_url) as http:
        body = {"model": "gpt-sim", "messages": USER, "stream": True}
        resp = await http.post(
            "/chat/completions", json=body, headers={"authorization": "Bearer k"}
        )
    lines = [line for line in resp.text.splitlines() if line]
    assert resp.headers["content-type"].startswith("text/event-stream")
    assert lines[-1] == "data: [DONE]"
    assert all(line.startswith("data: ") for line in lines)
    assert '"usage"' not in resp.text  # not asked for


async def test_required_tool_choice_calls_first_tool_with_schema_valid_arguments(
    client: openai.AsyncOpenAI,
) -> None:
    completion = await client.chat.completions.create(
        model="gpt-sim", messages=USER, tools=[WEATHER, TIME], tool_choice="required"
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    (call,) = choice.message.tool_calls or []
    assert call.id.startswith("call_") and call.type == "function"
    assert call.function.name == "get_weather"
    args = json.loads(call.function.arguments)
    assert violations(args, WEATHER["function"]["parameters"]) == []


async def test_named_tool_choice_and_none(client: openai.AsyncOpenAI) -> None:
    named = await client.chat.completions.create(
        model="gpt-sim",
        messages=USER,
        tools=[WEATHER, TIME],
        tool_choice={"type": "function", "function": {"name": "get_time"}},
    )
    calls = named.choices[0].message.tool_calls or []
    assert [c.function.name for c in calls if c.type == "function"] == ["get_time"]
    none = await client.chat.completions.create(
        model="gpt-sim", messages=USER, tools=[WEATHER], tool_choice="none"
    )
    assert none.choices[0].message.tool_calls is None
    assert none.choices[0].message.content == "Echo: hello there"


def _two_calls(turn: ChatTurn) -> Reply:
    return Reply(
        tool_calls=[
            ToolCallReply(name="get_weather", arguments={"city": "Paris", "unit": "c", "days": 1}),
            ToolCallReply(name="get_time", arguments={"tz": "Europe/Paris"}),
        ]
    )


async def test_parallel_tool_calls_stream_with_indices_and_respect_the_flag(
    client: openai.AsyncOpenAI, upstream: UpstreamServer
) -> None:
    upstream.register("gpt-par", _two_calls)
    stream: Any = await client.chat.completions.create(
        model="gpt-par", messages=USER, tools=[WEATHER, TIME], stream=True
    )
    calls: dict[int, dict[str, str]] = {}
    async for chunk in stream:
        for delta in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            entry = calls.setdefault(delta.index, {"id": "", "name": "", "args": ""})
            entry["id"] += delta.id or ""
            assert delta.function is not None
            entry["name"] += delta.function.name or ""
            entry["args"] += delta.function.arguments or ""
    assert [calls[i]["name"] for i in sorted(calls)] == ["get_weather", "get_time"]
    assert json.loads(calls[0]["args"]) == {"city": "Paris", "unit": "c", "days": 1}
    assert calls[0]["id"] != calls[1]["id"]

    single = await client.chat.completions.create(
        model="gpt-par", messages=USER, tools=[WEATHER, TIME], parallel_tool_calls=False
    )
    assert len(single.choices[0].message.tool_calls or []) == 1


async def test_json_schema_and_json_object_outputs_are_json(client: openai.AsyncOpenAI) -> None:
    schema = {
        "type": "object",
        "properties": {
            "answer": {"type": "string"},
            "confidence": {"type": "number", "minimum": 0, "maximum": 1},
            "tags": {"type": "array", "items": {"type": "string"}},
            "verdict": {"type": "string", "enum": ["pass", "fail"]},
        },
        "required": ["answer", "confidence", "tags", "verdict"],
        "additionalProperties": False,
    }
    strict = await client.chat.completions.create(
        model="gpt-sim",
        messages=USER,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "verdict", "schema": schema, "strict": True},
        },
    )
    assert violations(json.loads(strict.choices[0].message.content or ""), schema) == []
    loose = await client.chat.completions.create(
        model="gpt-sim", messages=USER, response_format={"type": "json_object"}
    )
    assert isinstance(json.loads(loose.choices[0].message.content or ""), dict)


async def test_max_tokens_truncates_and_stop_cuts(
    client: openai.AsyncOpenAI, upstream: UpstreamServer
) -> None:
    upstream.register("gpt-long", lambda turn: Reply(text="one two three four five. six"))
    short = await client.chat.completions.create(
        model="gpt-long", messages=USER, max_completion_tokens=2
    )
    assert short.choices[0].message.content == "one two"
    assert short.choices[0].finish_reason == "length"
    assert short.usage is not None and short.usage.completion_tokens == 2
    legacy = await client.chat.completions.create(model="gpt-long", messages=USER, max_tokens=3)
    assert legacy.choices[0].message.content == "one two three"
    stopped = await client.chat.completions.create(model="gpt-long", messages=USER, stop=["four"])
    assert stopped.choices[0].message.content == "one two three "
    assert stopped.choices[0].finish_reason == "stop"


async def test_repeated_prefix_reports_cached_tokens(client: openai.AsyncOpenAI) -> None:
    convo: Any = [
        {"role": "system", "content": "You are a careful assistant for the billing team."},
        {"role": "user", "content": "first question"},
    ]
    follow_up: Any = [
        *convo,
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "2"},
    ]
    other: Any = [{"role": "system", "content": "Another system prompt."}, convo[1]]
    cached = []
    for messages in (convo, follow_up, convo, other):
        completion = await client.chat.completions.create(model="gpt-cache", messages=messages)
        assert completion.usage is not None and completion.usage.prompt_tokens_details is not None
        cached.append(completion.usage.prompt_tokens_details.cached_tokens)
    first_prompt = 12  # system: 9 words and a period; user: 2 words
    assert cached == [0, first_prompt, first_prompt, 0]


async def test_embeddings_are_deterministic_in_float_and_base64(
    client: openai.AsyncOpenAI, upstream: UpstreamServer
) -> None:
    upstream.state.configure("emb-small", embedding_dimensions=8)
    floats = await client.embeddings.create(
        model="emb-small", input=["alpha", "beta"], encoding_format="float"
    )
    again = await client.embeddings.create(model="emb-small", input=["alpha", "beta"])
    assert [d.index for d in floats.data] == [0, 1]
    assert all(len(d.embedding) == 8 for d in floats.data)
    assert floats.data[0].embedding != floats.data[1].embedding
    for a, b in zip(floats.data, again.data, strict=True):
        assert a.embedding == pytest.approx(b.embedding, abs=1e-6)
    assert sum(x * x for x in floats.data[0].embedding) == pytest.approx(1.0, abs=1e-6)
    assert floats.usage.prompt_tokens == 2

    async with httpx.AsyncClient(base_url=upstream.openai_base_url) as http:
        body = {"model": "emb-small", "input": "alpha", "encoding_format": "base64"}
        resp = await http.post("/embeddings", json=body, headers={"authorization": "Bearer k"})
    packed = base64.b64decode(resp.json()["data"][0]["embedding"])
    assert list(struct.unpack("<8f", packed)) == pytest.approx(floats.data[0].embedding, abs=1e-6)

    wide = await client.embeddings.create(model="emb-small", input="alpha", dimensions=16)
    assert len(wide.data[0].embedding) == 16


async def test_models_lists_scripted_and_seen_models(
    client: openai.AsyncOpenAI, upstream: UpstreamServer
) -> None:
    upstream.register("gpt-listed", lambda turn: Reply(text="hi"))
    await client.chat.completions.create(model="gpt-seen", messages=USER)
    ids = [m.id async for m in client.models.list()]
    assert {"gpt-listed", "gpt-seen"} <= set(ids)


@pytest.mark.parametrize("path", ["/v1/rerank", "/rerank"])
async def test_rerank_orders_relevant_documents_first(upstream: UpstreamServer, path: str) -> None:
    documents = ["stock prices fell", "cats purr when happy", "dogs and cats as pets"]
    body = {"model": "rr", "query": "cats pets", "documents": documents, "top_n": 2}
    async with httpx.AsyncClient(base_url=upstream.base_url) as http:
        first = (await http.post(path, json=body)).json()
        second = (await http.post(path, json=body)).json()
    assert first["results"] == second["results"]
    assert [r["index"] for r in first["results"]] == [2, 1]
    scores = [r["relevance_score"] for r in first["results"]]
    assert scores == sorted(scores, reverse=True) and all(0 <= s <= 1 for s in scores)
    assert upstream.requests("rr", "rerank") == 2


async def test_rate_limit_with_and_without_retry_after(
    client: openai.AsyncOpenAI, upstream: UpstreamServer
) -> None:
    upstream.inject("gpt-rl", Fault(kind=FaultKind.RATE_LIMIT, retry_after=3, times=1))
    upstream.inject("gpt-rl", Fault(kind=FaultKind.RATE_LIMIT, times=1))
    with pytest.raises(openai.RateLimitError) as first:
        await client.chat.completions.create(model="gpt-rl", messages=USER)
    assert first.value.response.headers["retry-after"] == "3"
    assert first.value.code == "rate_limit_exceeded"
    with pytest.raises(openai.RateLimitError) as second:
        await client.chat.completions.create(model="gpt-rl", messages=USER)
    assert "retry-after" not in second.value.response.headers
    ok = await client.chat.completions.create(model="gpt-rl", messages=USER)
    assert ok.choices[0].message.content
    assert upstream.requests("gpt-rl") == 3


async def test_server_error_n_times_then_healthy_and_counters(
    client: openai.AsyncOpenAI, upstream: UpstreamServer
) -> None:
    upstream.inject("gpt-flaky", Fault(kind=FaultKind.SERVER_ERROR, times=2))
    for _ in range(2):
        with pytest.raises(openai.InternalServerError):
            await client.chat.completions.create(model="gpt-flaky", messages=USER)
    await client.chat.completions.create(model="gpt-flaky", messages=USER)
    await client.embeddings.create(model="emb", input="x")
    assert upstream.requests("gpt-flaky") == 3
    assert upstream.requests("gpt-flaky", "chat.completions") == 3
    assert upstream.requests(endpoint="embeddings") == 1
    assert upstream.state.stats.total == 4
    statuses = [r.status for r in upstream.state.ledger if r.model == "gpt-flaky"]
    assert statuses == [500, 500, 200]


async def test_error_bodies_use_openai_shapes(
    client: openai.AsyncOpenAI, upstream: UpstreamServer
) -> None:
    cases = [
        (FaultKind.CONTEXT_LENGTH, openai.BadRequestError, "context_length_exceeded"),
        (FaultKind.CONTENT_POLICY, openai.BadRequestError, "content_policy_violation"),
        (FaultKind.AUTH, openai.AuthenticationError, "invalid_api_key"),
        (FaultKind.UNAVAILABLE, openai.InternalServerError, None),
    ]
    for kind, error, code in cases:
        upstream.inject("gpt-err", Fault(kind=kind, times=1))
        with pytest.raises(error) as caught:
            await client.chat.completions.create(model="gpt-err", messages=USER)
        assert caught.value.code == code
        assert isinstance(caught.value.body, dict) and caught.value.body["message"]


async def test_context_window_setting_rejects_long_prompts(
    client: openai.AsyncOpenAI, upstream: UpstreamServer
) -> None:
    upstream.state.configure("gpt-tiny", context_window=5)
    await client.chat.completions.create(model="gpt-tiny", messages=USER)
    with pytest.raises(openai.BadRequestError) as caught:
        long: Any = [{"role": "user", "content": "word " * 10}]
        await client.chat.completions.create(model="gpt-tiny", messages=long)
    assert caught.value.code == "context_length_exceeded"
    assert "maximum context length is 5 tokens" in caught.value.message


async def test_hang_holds_until_the_client_gives_up(upstream: UpstreamServer) -> None:
    upstream.inject("gpt-hang", Fault(kind=FaultKind.HANG))
    sdk = openai.AsyncOpenAI(
        base_url=upstream.openai_base_url, api_key="k", max_retries=0, timeout=0.4
    )
    started = time.monotonic()
    with pytest.raises(openai.APITimeoutError):
        await sdk.chat.completions.create(model="gpt-hang", messages=USER)
    assert 0.35 < time.monotonic() - started < UNBOUNDED
    await sdk.close()


async def test_missing_terminator_and_no_usage_on_the_wire(upstream: UpstreamServer) -> None:
    upstream.inject("gpt-raw", Fault(kind=FaultKind.MISSING_TERMINATOR, times=1))
    upstream.inject("gpt-raw", Fault(kind=FaultKind.NO_USAGE, times=1))
    body = {
        "model": "gpt-raw",
        "messages": USER,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    async with httpx.AsyncClient(base_url=upstream.openai_base_url) as http:
        resp = await http.post(
            "/chat/completions", json=body, headers={"authorization": "Bearer k"}
        )
        healthy = await http.post(
            "/chat/completions", json=body, headers={"authorization": "Bearer k"}
        )
    assert "[DONE]" not in resp.text and '"finish_reason":"stop"' in resp.text
    assert '"prompt_tokens"' not in resp.text
    assert healthy.text.rstrip().endswith("data: [DONE]") and '"prompt_tokens"' in healthy.text


async def test_admin_endpoints_drive_faults_and_stats(
    client: openai.AsyncOpenAI, upstream: UpstreamServer
) -> None:
    async with httpx.AsyncClient(base_url=upstream.base_url) as admin:
        added = await admin.post("/_admin/faults", json={"model": "gpt-adm", "kind": "unavailable"})
        assert added.status_code == 201
        bad = await admin.post("/_admin/faults", json={"model": "m", "kind": "nonsense"})
        assert bad.status_code == 422
        for _ in range(2):
            with pytest.raises(openai.InternalServerError) as caught:
                await client.chat.completions.create(model="gpt-adm", messages=USER)
            assert caught.value.status_code == 503
        assert len((await admin.get("/_admin/faults")).json()) == 1
        assert (
            await admin.delete("/_admin/faults", params={"model": "gpt-adm"})
        ).status_code == 204
        await client.chat.completions.create(model="gpt-adm", messages=USER)
        stats = (await admin.get("/_admin/stats")).json()
        assert stats == {"total": 3, "models": {"gpt-adm": {"chat.completions": 3}}}
        ledger = (await admin.get("/_admin/requests")).json()
        assert [row["status"] for row in ledger] == [503, 503, 200]
        assert "hello" not in json.dumps(ledger)  # ids and usage only, never content
        await admin.delete("/_admin/stats")
        assert (await admin.get("/_admin/stats")).json()["total"] == 0
        configured = await admin.post("/_admin/models/emb-x", json={"embedding_dimensions": 4})
        assert configured.json()["embedding_dimensions"] == 4
    vectors = await client.embeddings.create(model="emb-x", input="a")
    assert len(vectors.data[0].embedding) == 4


async def test_malformed_requests_get_openai_400s(upstream: UpstreamServer) -> None:
    async with httpx.AsyncClient(base_url=upstream.openai_base_url) as http:
        auth = {"authorization": "Bearer k"}
        not_json = await http.post("/chat/completions", content=b"{", headers=auth)
        no_messages = await http.post("/chat/completions", json={"model": "m"}, headers=auth)
        no_key = await http.post("/chat/completions", json={"model": "m", "messages": USER})
    assert not_json.status_code == 400 and not_json.json()["error"]["type"]
    assert no_messages.status_code == 400 and "messages" in no_messages.json()["error"]["message"]
    assert no_key.status_code == 401 and no_key.json()["error"]["code"] == "invalid_api_key"


async def test_responders_scripted_async_wildcard_and_failing(
    client: openai.AsyncOpenAI, upstream: UpstreamServer
) -> None:
    async def slow_thinker(turn: ChatTurn) -> Reply:
        return Reply(text=f"{len(turn.messages)} message(s)")

    def broken(turn: ChatTurn) -> Reply:
        raise RuntimeError("responder bug")

    script = ScriptedResponder(["first", Reply(text="second")])
    upstream.register("gpt-script", script)
    upstream.register("gpt-async", slow_thinker)
    upstream.register("gpt-broken", broken)
    upstream.register("*", lambda turn: Reply(text="wildcard"))

    async def ask(model: str) -> str | None:
        completion = await client.chat.completions.create(model=model, messages=USER)
        return completion.choices[0].message.content

    assert [await ask("gpt-script") for _ in range(3)] == ["first", "second", "second"]
    assert script.calls == 3
    assert await ask("gpt-async") == "1 message(s)"
    assert await ask("anything-else") == "wildcard"
    with pytest.raises(openai.InternalServerError):
        await ask("gpt-broken")


async def test_faults_can_target_one_endpoint(
    client: openai.AsyncOpenAI, upstream: UpstreamServer
) -> None:
    upstream.inject("*", Fault(kind=FaultKind.RATE_LIMIT, endpoint="embeddings"))
    assert (await client.chat.completions.create(model="any", messages=USER)).choices
    with pytest.raises(openai.RateLimitError):
        await client.embeddings.create(model="any", input="x")
    async with httpx.AsyncClient(base_url=upstream.base_url) as admin:
        assert (await admin.post("/_admin/reset")).status_code == 204
    assert upstream.state.faults.listing() == [] and upstream.requests() == 0
    assert (await client.embeddings.create(model="any", input="x")).data
