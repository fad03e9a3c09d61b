"""The invoke path end to end: the official openai SDK as the client of this API, the real
openai and anthropic SDKs as adapters to the project's local upstream, a durable receipt for
every call, and idempotency that never calls the provider twice."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any, cast

import httpx
import openai
import pytest
from openai import AsyncOpenAI
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client

from core.settings import Settings
from providers.upstream import UpstreamServer
from store.receipts import by_key
from tests.conftest import TokenFactory
from tests.helpers.catalog import profile_event, publish, record_evidence, register
from tests.helpers.deadline import eventually


@pytest.fixture
async def catalog(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
) -> dict[str, str]:
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    deployments = {
        "sim/openai": {"provider": "openai", "model": "gpt-sim"},
        "sim/anthropic": {"provider": "anthropic", "model": "claude-sim"},
        "sim/embed": {"provider": "openai", "model": "embed-sim"},
    }
    caps = {
        "tool-calling": 0.95,
        "parallel-tool-calling": 0.9,
        "json-schema": 0.95,
        "strict-json": 0.95,
    }
    for dep, fields in deployments.items():
        await register(http, auth, dep, endpointRef=upstream.endpoint_ref, **fields)
        await record_evidence(temporal_client, tenant, dep, caps)
        assert (
            await http.post(f"/factory/model-deployments/{dep}/approve", headers=auth)
        ).status_code == 200
    for profile, dep, extra in (
        ("chat", "sim/openai", {}),
        ("claude", "sim/anthropic", {}),
        ("embedding", "sim/embed", {"modality": "Embedding", "embeddingCompatibility": "sim-256"}),
    ):
        event = profile_event(profile, [dep], {"tool-calling": 0.8}, **extra)
        assert (await publish(http, auth, event)).status_code == 200
    return auth


@pytest.fixture
def sdk(openai_sdk: AsyncOpenAI, catalog: dict[str, str]) -> AsyncOpenAI:
    """The tenant's openai SDK, once this module's catalog is published."""
    return openai_sdk


async def test_non_streaming_chat_writes_a_receipt(
    sdk: AsyncOpenAI,
    tenant: str,
    sessions: async_sessionmaker[AsyncSession],
    settings: Settings,
    upstream: UpstreamServer,
    http: httpx.AsyncClient,
    catalog: dict[str, str],
) -> None:
    run = uuid.uuid4()
    raw = await sdk.chat.completions.with_raw_response.create(
        model="chat",
        messages=[{"role": "user", "content": "hello router"}],
        extra_headers={"X-Run-Id": str(run), "Idempotency-Key": "nonstream-1"},
    )
    completion = raw.parse()
    assert completion.choices[0].message.content == "Echo: hello router"
    assert completion.model == "chat"
    assert raw.headers["x-model-router-deployment"] == "sim/openai"
    receipt_id = raw.headers["x-model-router-receipt-id"]

    async with sessions() as s:
        row = await by_key(s, tenant, "nonstream-1")
    assert row is not None and str(row.invocation_id) == receipt_id
    assert (row.outcome, row.usage_status) == ("Completed", "Reported")
    assert row.input_tokens and row.output_tokens and row.ended_at is not None
    assert row.deployment_id == "sim/openai" and row.run_id == run
    assert row.request_hash.startswith("sha256:") and row.output_artifact_ref
    # The answer's file is written beside the answer, not ahead of it (activities/invoke_close.py):
    # a replay waits for it through the workflow's result, a reader of the volume polls.
    name = row.output_artifact_ref.split(":")[1]
    stored = await eventually(lambda: next((settings.artifact_root / tenant).rglob(name), None))
    assert json.loads(stored.read_bytes())["text"] == "Echo: hello router"

    listed = await http.get(f"/factory/runs/{run}/model-receipts", headers=catalog)
    [receipt] = listed.json()
    assert receipt["invocationId"] == receipt_id and receipt["routePlanId"]
    assert set(receipt) >= {
        "invocationId",
        "tenantId",
        "projectId",
        "runId",
        "attemptId",
        "profileId",
        "deploymentId",
        "routePlanId",
        "fallbackUsed",
        "requestHash",
        "idempotencyKey",
        "policyDecisionId",
        "outcome",
        "usageStatus",
        "inputTokens",
        "outputTokens",
        "estimatedCostUsd",
        "pricingRevision",
        "latencyMs",
        "outputArtifactRef",
        "startedAt",
        "endedAt",
    }


async def test_streaming_chat_through_both_adapters(sdk: AsyncOpenAI) -> None:
    for profile in ("chat", "claude"):
        stream = await sdk.chat.completions.create(
            model=profile,
            messages=[{"role": "user", "content": "stream me"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        text, usage, final = "", None, None
        async for event in stream:
            if event.choices and event.choices[0].delta.content:
                text += event.choices[0].delta.content
            if event.usage:
                usage = event.usage
            extra = getattr(event, "model_router", None)
            if extra:
                final = extra
        assert text == "Echo: stream me", profile
        assert usage is not None and usage.completion_tokens > 0
        assert final is not None and final["outcome"] == "Completed"


async def test_tools_parallel_tools_and_json_schema(sdk: AsyncOpenAI) -> None:
    tools: Any = [
        {
            "type": "function",
            "function": {
                "name": name,
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            },
        }
        for name in ("get_weather", "get_time")
    ]
    for profile in ("chat", "claude"):
        one = await sdk.chat.completions.create(
            model=profile,
            messages=[{"role": "user", "content": "weather?"}],
            tools=tools,
            tool_choice="required",
        )
        calls: Any = one.choices[0].message.tool_calls
        assert calls and calls[0].function.name == "get_weather"
        assert "city" in json.loads(calls[0].function.arguments)
        assert one.choices[0].finish_reason == "tool_calls"

    schema = {
        "type": "object",
        "properties": {"answer": {"type": "integer"}},
        "required": ["answer"],
        "additionalProperties": False,
    }
    structured = await sdk.chat.completions.create(
        model="chat",
        messages=[{"role": "user", "content": "2+2"}],
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "a", "schema": schema, "strict": True},
        },
    )
    assert isinstance(json.loads(structured.choices[0].message.content or "")["answer"], int)


async def test_a_json_schema_is_strict_only_when_the_caller_says_so(
    sdk: AsyncOpenAI, upstream: UpstreamServer
) -> None:
    # OpenAI's default is not strict. Sent strict, a schema written for that default (not
    # every property required, no additionalProperties: false) was a 400 from OpenAI that the
    # same request sent to it directly was not.
    from providers.upstream import ChatTurn, Reply

    sent: list[Any] = []

    def record(turn: ChatTurn) -> Reply:
        sent.append(turn.raw["response_format"]["json_schema"].get("strict"))
        return Reply(text='{"a": "b"}')

    upstream.register("gpt-sim", record)
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    try:
        for strict in (None, True, False):
            given: dict[str, Any] = {"name": "r", "schema": schema}
            if strict is not None:
                given["strict"] = strict
            await sdk.chat.completions.create(
                model="chat",
                messages=[{"role": "user", "content": "json"}],
                response_format=cast(Any, {"type": "json_schema", "json_schema": given}),
            )
    finally:
        from providers.upstream import default_responder

        upstream.register("gpt-sim", default_responder)
    assert [bool(s) for s in sent] == [False, True, False]


async def test_a_json_schemas_description_reaches_the_provider(
    sdk: AsyncOpenAI, upstream: UpstreamServer
) -> None:
    # It tells the model what the output is for; it was accepted and dropped.
    from providers.upstream import ChatTurn, Reply, default_responder

    sent: list[Any] = []

    def record(turn: ChatTurn) -> Reply:
        sent.append(turn.raw["response_format"]["json_schema"].get("description"))
        return Reply(text='{"a": "b"}')

    upstream.register("gpt-sim", record)
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    given = {"name": "r", "schema": schema, "description": "a city's name"}
    try:
        await sdk.chat.completions.create(
            model="chat",
            messages=[{"role": "user", "content": "json"}],
            response_format=cast(Any, {"type": "json_schema", "json_schema": given}),
        )
    finally:
        upstream.register("gpt-sim", default_responder)
    assert sent == ["a city's name"]


async def test_every_chunk_of_a_stream_carries_its_creation_time(
    sdk: AsyncOpenAI, upstream: UpstreamServer
) -> None:
    # The text chunks kept the stream's `created`; the finish and usage chunks took the time
    # they were written, a later second on a stream longer than one (OpenAI's keep one).
    from providers.upstream import Fault, FaultKind

    upstream.inject("gpt-sim", Fault(kind=FaultKind.KEEP_ALIVE, after_chunks=3, delay=1.2))
    try:
        stream = await sdk.chat.completions.create(
            model="chat",
            messages=[{"role": "user", "content": "a slow one"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        created = {chunk.created async for chunk in stream}
    finally:
        upstream.state.clear_faults("gpt-sim")
    assert len(created) == 1, created


async def test_parallel_tool_calls_stream(sdk: AsyncOpenAI, upstream: UpstreamServer) -> None:
    from providers.upstream import Reply, ToolCallReply

    upstream.register(
        "gpt-sim",
        lambda turn: (
            Reply(
                tool_calls=[
                    ToolCallReply(name="a", arguments={"x": 1}),
                    ToolCallReply(name="b", arguments={"y": 2}),
                ]
            )
            if turn.tools
            else Reply(text="Echo: " + turn.last_user_text)
        ),
    )
    try:
        tools: Any = [
            {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
            for n in ("a", "b")
        ]
        stream = await sdk.chat.completions.create(
            model="chat",
            messages=[{"role": "user", "content": "both"}],
            tools=tools,
            parallel_tool_calls=True,
            stream=True,
        )
        calls: dict[int, dict[str, str]] = {}
        async for event in stream:
            for c in (event.choices[0].delta.tool_calls or []) if event.choices else []:
                entry = calls.setdefault(c.index, {"name": "", "args": ""})
                entry["name"] += (c.function.name or "") if c.function else ""
                entry["args"] += (c.function.arguments or "") if c.function else ""
        assert [calls[i]["name"] for i in sorted(calls)] == ["a", "b"]
        assert json.loads(calls[1]["args"]) == {"y": 2}
    finally:
        from providers.upstream import default_responder

        upstream.register("gpt-sim", default_responder)


async def test_embeddings_and_models(sdk: AsyncOpenAI) -> None:
    result = await sdk.embeddings.create(model="embedding", input=["a", "b"])  # base64 by default
    assert len(result.data) == 2 and len(result.data[0].embedding) > 0
    assert result.data[0].embedding != result.data[1].embedding
    floats = await sdk.embeddings.create(model="embedding", input="a", encoding_format="float")
    assert floats.data[0].embedding == pytest.approx(result.data[0].embedding, rel=1e-6)
    models = {m.id async for m in sdk.models.list()}
    assert models == {"chat", "claude", "embedding"}
    # One of them, as the list names it (it was a 404 for every profile).
    assert (await sdk.models.retrieve("chat")).id == "chat"
    with pytest.raises(openai.NotFoundError) as missing:
        await sdk.models.retrieve("no-such-profile")
    assert missing.value.code == "model_not_found"


async def test_what_the_sdk_sends_back_or_leaves_null_is_taken(
    sdk: AsyncOpenAI, upstream: UpstreamServer
) -> None:
    """A refusal the gateway answered with, appended to the history as the SDK returns it
    (content null, `refusal` its words), is the assistant's turn: it was dropped, the turn
    left empty. `n` and `stream` sent as null ask for nothing, as other fields' nulls do
    (they were a 400). The usage names the prompt's cached part."""
    from providers.upstream import ChatTurn, Reply, default_responder

    said: dict[str, str] = {}  # what the provider was sent, by role

    def respond(turn: ChatTurn) -> Reply:
        said.update({m.role: m.text for m in turn.messages})
        return Reply(text="k")

    upstream.register("gpt-sim", respond)
    refused: Any = {"role": "assistant", "content": None, "refusal": "I cannot help with that."}
    try:
        answer = await sdk.chat.completions.create(
            model="chat",
            messages=[{"role": "user", "content": "q"}, refused, {"role": "user", "content": "ok"}],
            n=None,
            stream=None,
        )
    finally:
        upstream.register("gpt-sim", default_responder)
    assert answer.choices[0].message.content == "k"
    assert said["assistant"] == "I cannot help with that."
    usage: Any = answer.usage
    assert usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens >= 0


async def test_token_arrays_are_refused_saying_so(sdk: AsyncOpenAI) -> None:
    """LangChain's OpenAIEmbeddings sends token arrays by default: the refusal said only
    "Input should be a valid string", twice."""
    with pytest.raises(openai.BadRequestError) as refused:
        await sdk.embeddings.create(model="embedding", input=[[1, 2, 3]])
    assert "token arrays are not accepted" in str(refused.value)
    assert "check_embedding_ctx_length" in str(refused.value)
    body: Any = refused.value.body
    assert "input" in json.dumps(body)


async def test_embeddings_give_the_dimensions_asked_for(sdk: AsyncOpenAI) -> None:
    # `dimensions` reaches the provider (text-embedding-3's shortened vectors for a narrower
    # index); it was accepted and dropped, and the index write failed on full-width vectors.
    full = await sdk.embeddings.create(model="embedding", input="a", encoding_format="float")
    narrow = await sdk.embeddings.create(model="embedding", input="a", dimensions=8)
    assert len(narrow.data[0].embedding) == 8 != len(full.data[0].embedding)
    # It is part of the request a key is bound to: another width is another request.
    key = {"Idempotency-Key": f"dim-{uuid.uuid4().hex}"}
    await sdk.embeddings.create(model="embedding", input="a", dimensions=8, extra_headers=key)
    with pytest.raises(openai.ConflictError):
        await sdk.with_options(max_retries=0).embeddings.create(
            model="embedding", input="a", dimensions=16, extra_headers=key
        )


async def test_hundred_concurrent_calls_with_one_key_make_one_provider_call(
    sdk: AsyncOpenAI, upstream: UpstreamServer
) -> None:
    before = upstream.requests("gpt-sim")
    key = f"same-{uuid.uuid4().hex}"

    async def call() -> str:
        done = await sdk.chat.completions.create(
            model="chat",
            messages=[{"role": "user", "content": "only once"}],
            extra_headers={"Idempotency-Key": key},
        )
        return done.choices[0].message.content or ""

    answers = await asyncio.gather(*(call() for _ in range(100)))
    assert set(answers) == {"Echo: only once"}
    assert upstream.requests("gpt-sim") - before == 1

    with pytest.raises(openai.ConflictError) as conflict:
        await sdk.with_options(max_retries=3).chat.completions.create(
            model="chat",
            messages=[{"role": "user", "content": "something else"}],
            extra_headers={"Idempotency-Key": key},
        )
    # The SDK retries a 409 unless told not to; the key's answer will not change.
    assert conflict.value.response.headers["x-should-retry"] == "false"
    assert upstream.requests("gpt-sim") - before == 1


async def test_a_key_used_by_another_run_or_project_is_not_its_answer(
    sdk: AsyncOpenAI, upstream: UpstreamServer
) -> None:
    # Keys are the tenant's. A runtime keying its steps "step-1", "step-2" in every run got
    # the first run's answer for the second run's step, its receipt and cost on the first run.
    key = f"step-{uuid.uuid4().hex}"
    ask: Any = {"model": "chat", "messages": [{"role": "user", "content": "step one"}]}
    first_run = {"Idempotency-Key": key, "X-Run-Id": str(uuid.uuid4())}
    await sdk.chat.completions.create(**ask, extra_headers=first_run)
    before = upstream.requests("gpt-sim")
    # The same run retrying its step (a new attempt) is the same call: replayed.
    retried = {**first_run, "X-Attempt-Id": str(uuid.uuid4())}
    assert (await sdk.chat.completions.create(**ask, extra_headers=retried)).choices
    for other in (
        {"Idempotency-Key": key, "X-Run-Id": str(uuid.uuid4())},
        {**first_run, "X-Project-Id": "another-project"},
    ):
        with pytest.raises(openai.ConflictError) as conflict:
            await sdk.chat.completions.create(**ask, extra_headers=other)
        assert "another run or project" in conflict.value.response.text
    assert upstream.requests("gpt-sim") == before


async def test_unknown_profile_and_bad_input(sdk: AsyncOpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        await sdk.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    # OpenAI's `error` member, which the SDK reads: without it the exception's `type` was the
    # problem's URI, and `code` and `param` were None. The problem's members stay alongside.
    assert (missing.value.code, missing.value.param) == ("model_not_found", "model")
    assert missing.value.type == "invalid_request_error"
    assert missing.value.response.headers["content-type"] == "application/problem+json"
    assert missing.value.response.json()["field"] == "body.model"
    with pytest.raises(openai.BadRequestError) as empty:
        await sdk.chat.completions.create(model="chat", messages=[])
    assert (empty.value.type, empty.value.param) == ("invalid_request_error", "messages")
    # A choice that forces a tool needs the tool: dropped, `required` was answered in text.
    for choice in ("required", {"type": "function", "function": {"name": "absent"}}):
        with pytest.raises(openai.BadRequestError) as forced:
            await sdk.chat.completions.create(
                model="chat",
                messages=[{"role": "user", "content": "x"}],
                tool_choice=cast(Any, choice),
            )
        assert forced.value.param == "tool_choice", forced.value.body
    with pytest.raises(openai.BadRequestError) as many:
        await sdk.embeddings.create(model="embedding", input=["a"] * 2049)
    assert many.value.param == "input", many.value.body
    with pytest.raises(openai.BadRequestError) as narrow:
        await sdk.embeddings.create(model="embedding", input="a", dimensions=0)
    assert narrow.value.param == "dimensions"


async def test_the_stream_ends_as_openai_s_does_with_the_receipt_on_its_last_chunk(
    sdk: AsyncOpenAI,
) -> None:
    """A separate receipt chunk after the usage set the SDK helper's usage back to None, and
    without `include_usage` it was a chunk with no choices that a `choices[0]` loop fell on."""
    messages: Any = [{"role": "user", "content": "stream me"}]
    async with sdk.chat.completions.stream(
        model="chat", messages=messages, stream_options={"include_usage": True}
    ) as helper:
        final = await helper.get_final_completion()
    assert final.usage is not None and final.usage.completion_tokens > 0
    assert final.choices[0].message.content == "Echo: stream me"

    for include_usage in (False, True):
        stream = await sdk.chat.completions.create(
            model="chat",
            messages=messages,
            stream=True,
            stream_options={"include_usage": include_usage},
        )
        chunks = [c async for c in stream]
        last = chunks[-1]
        assert (last.model_extra or {})["model_router"]["outcome"] == "Completed"
        assert not any("model_router" in (c.model_extra or {}) for c in chunks[:-1])
        if include_usage:  # the finish chunk, then the usage chunk (no choices) last
            assert last.choices == [] and last.usage is not None
            assert chunks[-2].choices[0].finish_reason == "stop"
        else:
            assert all(c.choices for c in chunks)
            assert last.choices[0].finish_reason == "stop"


@pytest.mark.parametrize(
    "shape", ["interleaved_tool_calls", "repeated_tool_call_heads", "shared_tool_call_index"]
)
async def test_parallel_tool_calls_as_servers_stream_them_reach_the_stream_helper_whole(
    sdk: AsyncOpenAI, upstream: UpstreamServer, shape: str
) -> None:
    """An OpenAI deployment may interleave parallel calls' fragments; the SDK helper takes a call
    as done when a chunk of another index arrives. Passed through, its `arguments.done` fired
    with half the arguments, and a strict tool's parse raised. Other servers repeat a call's
    id and name on every fragment and number calls from 1: passed through, the helper joined
    the repeats into one name ("aa") and raised IndexError on the call numbered 1. Others
    (Ollama, Dynamo) send every call at index 0, each with its own id: the second call's
    arguments were appended to the first's."""
    from providers.upstream import Fault, FaultKind, Reply, ToolCallReply, default_responder

    arguments = {"a": {"path": "src/some/long/file.py"}, "b": {"pattern": "needle in a haystack"}}
    upstream.register(
        "gpt-sim",
        lambda turn: Reply(
            tool_calls=[ToolCallReply(name=n, arguments=a) for n, a in arguments.items()]
        ),
    )
    upstream.inject("gpt-sim", Fault(kind=FaultKind(shape), times=1))
    tools: Any = [
        {
            "type": "function",
            "function": {
                "name": name,
                "strict": True,
                "parameters": {
                    "type": "object",
                    "properties": {field: {"type": "string"}},
                    "required": [field],
                    "additionalProperties": False,
                },
            },
        }
        for name, field in (("a", "path"), ("b", "pattern"))
    ]
    try:
        async with sdk.chat.completions.stream(
            model="chat",
            messages=[{"role": "user", "content": "both"}],
            tools=tools,
            parallel_tool_calls=True,
        ) as helper:
            done = [
                (event.name, json.loads(event.arguments))
                async for event in helper
                if event.type == "tool_calls.function.arguments.done"
            ]
            final = await helper.get_final_completion()
    finally:
        upstream.register("gpt-sim", default_responder)
    assert done == list(arguments.items())
    calls: Any = final.choices[0].message.tool_calls
    assert [c.function.parsed_arguments for c in calls] == list(arguments.values())
    assert [c.function.name for c in calls] == list(arguments)
    assert len({c.id for c in calls}) == 2 and all(c.id.startswith("call_") for c in calls)
    assert final.choices[0].finish_reason == "tool_calls"


async def test_a_part_that_is_not_text_is_refused_never_dropped(sdk: AsyncOpenAI) -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    content: Any = [{"type": "text", "text": "what is this?"}, image]
    with pytest.raises(openai.BadRequestError) as refused:
        await sdk.chat.completions.create(
            model="chat", messages=[{"role": "user", "content": content}]
        )
    body: Any = refused.value.body
    assert "messages.0.content.1" in json.dumps(body), body
    # Settings that change the answer but cannot be mapped: refused, each named.
    for setting, field in (
        ({"logprobs": True, "top_logprobs": 5}, "body.logprobs"),
        ({"top_p": 0.5}, "body.top_p"),
        ({"reasoning_effort": "high"}, "body.reasoning_effort"),
        ({"web_search_options": {}}, "body.web_search_options"),
        ({"modalities": ["text", "audio"]}, "body.modalities"),
        ({"extra_body": {"functions": [{"name": "f", "parameters": {}}]}}, "body.functions"),
    ):
        with pytest.raises(openai.BadRequestError) as refused:
            await sdk.chat.completions.create(
                model="chat", messages=[{"role": "user", "content": "x"}], **setting
            )
        assert field in json.dumps(refused.value.body), (setting, refused.value.body)
    # Their off values are no setting at all.
    off = await sdk.chat.completions.create(
        model="chat",
        messages=[{"role": "user", "content": "x"}],
        logprobs=False,
        frequency_penalty=0,
        top_p=1,
        modalities=["text"],
    )
    assert off.choices[0].message.content
    # A named tool choice whose function is not an object: the caller's 400, not a 500.
    choice: Any = {"type": "function", "function": "x"}
    with pytest.raises(openai.BadRequestError):
        await sdk.chat.completions.create(
            model="chat",
            messages=[{"role": "user", "content": "x"}],
            tools=[{"type": "function", "function": {"name": "x"}}],
            tool_choice=choice,
        )
