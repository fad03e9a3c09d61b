"""The Anthropic Messages surface with the official anthropic SDK as the client, against an
OpenAI-protocol and an Anthropic-protocol deployment of the local upstream: plain and streamed
answers (read with the SDK's own stream helper), a tool round trip, JSON through a forced tool,
usage equal to the receipt's, idempotency, pinned runs, a cut stream, errors in Anthropic's
envelope, cache_control passed through, and count_tokens."""

from __future__ import annotations

import json
import uuid
from typing import Any

import anthropic
import httpx
import pytest
from anthropic import AsyncAnthropic
from anthropic.types import RawMessageStartEvent
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client

from providers.upstream import ChatTurn, Fault, FaultKind, Reply, UpstreamServer, default_responder
from tests.conftest import TokenFactory
from tests.helpers.catalog import approved_deployment, profile_event, publish
from tests.helpers.surfaces import PROTOCOLS, Catalog, receipt

# The Messages API's stream event types: the SDK casts any other to one of these classes.
MESSAGES_EVENTS = {
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
}

WEATHER: Any = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


@pytest.fixture
def client(anthropic_sdk: AsyncAnthropic, catalog: Catalog) -> AsyncAnthropic:
    """The tenant's anthropic SDK, once the catalog is published."""
    return anthropic_sdk


def _text(message: Any) -> str:
    return "".join(b.text for b in message.content if b.type == "text")


def _usage_matches(usage: Any, row: Any) -> None:
    cached = row.cached_input_tokens or 0
    parts = (usage.cache_read_input_tokens or 0) + (usage.cache_creation_input_tokens or 0)
    assert usage.input_tokens + parts == row.input_tokens
    assert usage.cache_read_input_tokens == cached
    assert usage.output_tokens == row.output_tokens and row.output_tokens > 0


async def test_cache_writes_are_reported_apart_from_the_input(
    client: AsyncAnthropic, catalog: Catalog, sessions: async_sessionmaker[AsyncSession]
) -> None:
    # An Anthropic deployment writes the history to its prompt cache (the adapter's breakpoint)
    # and bills those tokens at 1.25 times input: they were counted inside input_tokens, and
    # cache_creation_input_tokens was always 0.
    key = f"msg-cache-{uuid.uuid4().hex}"
    history: Any = [
        {"role": "user", "content": f"first {uuid.uuid4().hex}"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "second"},
    ]
    message = await client.messages.create(
        model=catalog.profile("anthropic"),
        max_tokens=50,
        system="A stable system prompt for the agent.",
        messages=history,
        extra_headers={"Idempotency-Key": key},
    )
    assert (message.usage.cache_creation_input_tokens or 0) > 0, message.usage
    row = await receipt(sessions, catalog.tenant, key)
    _usage_matches(message.usage, row)
    # The receipt keeps the writes apart (the reconciler prices them), and a replay of the key
    # reports them from it as the live answer did: it folded them into input_tokens.
    assert row.cache_write_input_tokens == message.usage.cache_creation_input_tokens
    replayed = await client.messages.create(
        model=catalog.profile("anthropic"),
        max_tokens=50,
        system="A stable system prompt for the agent.",
        messages=history,
        extra_headers={"Idempotency-Key": key},
    )
    assert replayed.id == message.id
    assert replayed.usage == message.usage


async def test_the_stop_sequence_that_ended_an_anthropic_answer_is_named(
    client: AsyncAnthropic, catalog: Catalog
) -> None:
    """It was `end_turn` and no sequence: a loop telling a stop sequence from a natural end
    could not. Streamed, whole and replayed alike."""
    body: Any = {
        "model": catalog.profile("anthropic"),
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "alpha ### beta"}],
        "stop_sequences": ["###"],
        "extra_headers": {"Idempotency-Key": f"msg-stop-{uuid.uuid4().hex}"},
    }
    whole = await client.messages.create(**body)
    async with client.messages.stream(**{**body, "extra_headers": {}}) as stream:
        streamed = await stream.get_final_message()
    replayed = await client.messages.create(**body)
    for message in (whole, streamed, replayed):
        assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "###")
        assert _text(message) == "Echo: alpha "


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_non_stream_answer_with_the_receipts_usage(
    client: AsyncAnthropic,
    catalog: Catalog,
    sessions: async_sessionmaker[AsyncSession],
    protocol: str,
) -> None:
    key = f"msg-{uuid.uuid4().hex}"
    raw = await client.messages.with_raw_response.create(
        model=catalog.profile(protocol),
        max_tokens=200,
        system=[{"type": "text", "text": "be brief"}],
        messages=[{"role": "user", "content": "hello messages"}],
        extra_body={"temperature": 0.2},
        stop_sequences=["never-said"],
        extra_headers={"Idempotency-Key": key},
    )
    message = await raw.parse()
    assert message._request_id == raw.headers["x-request-id"]  # read from `request-id`
    assert message.type == "message" and message.role == "assistant"
    assert message.model == catalog.profile(protocol)
    assert [b.type for b in message.content] == ["text"]
    assert _text(message) == "Echo: hello messages"
    assert message.stop_reason == "end_turn"
    row = await receipt(sessions, catalog.tenant, key)
    assert raw.headers["x-model-router-receipt-id"] == str(row.invocation_id)
    assert raw.headers["x-model-router-deployment"] == catalog.deployment(protocol)
    assert message.id == f"msg_{row.invocation_id.hex}"
    assert raw.headers["x-model-router-usage-status"] == "Reported"
    # The receipt also rides in the body, as an extra field the SDK keeps.
    extra: Any = getattr(message, "model_router")  # noqa: B009
    assert extra["receiptId"] == str(row.invocation_id)
    assert extra["deploymentId"] == row.deployment_id and extra["outcome"] == "Completed"
    assert (row.outcome, row.usage_status) == ("Completed", "Reported")
    _usage_matches(message.usage, row)


async def test_source_text_that_spells_an_escaped_nul_is_sent_on(
    client: AsyncAnthropic, catalog: Catalog
) -> None:
    # A coding agent's tool result quotes source such as `const NUL = "\u0000";`: six
    # characters, no NUL. It was refused as one (400), and stayed in the history, so every
    # later turn of the session was refused too.
    source = 'const NUL = "\\u0000"; // and a regex: /[\\u0000-\\u001f]/'
    assert "\x00" not in source
    message = await client.messages.create(
        model=catalog.profile("anthropic"),
        max_tokens=200,
        messages=[{"role": "user", "content": source}],
    )
    assert _text(message) == f"Echo: {source}"


async def test_a_nul_in_a_tool_result_is_sent_on_and_one_in_the_model_is_refused(
    client: AsyncAnthropic, catalog: Catalog, sessions: async_sessionmaker[AsyncSession]
) -> None:
    # A tool that printed a binary file: its NUL was refused (400) as PostgreSQL text cannot
    # hold one, though the content is never stored, and the result stays in the history, so
    # every later turn of the session was refused too.
    key = f"msg-nul-{uuid.uuid4().hex}"
    history: Any = [
        {"role": "user", "content": "read the file"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "cat", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ELF\x00\x01"}
            ],
        },
    ]
    message = await client.messages.create(
        model=catalog.profile("anthropic"),
        max_tokens=200,
        messages=history,
        extra_headers={"Idempotency-Key": key},
    )
    assert _text(message) == "Tool result received: ELF\x00\x01"
    assert (await receipt(sessions, catalog.tenant, key)).outcome == "Completed"
    # What is stored refuses it, naming the field: the profile id is on the receipt.
    with pytest.raises(anthropic.BadRequestError) as refused:
        await client.messages.create(
            model=catalog.profile("anthropic") + "\x00",
            max_tokens=10,
            messages=[{"role": "user", "content": "x"}],
        )
    assert "body.model" in refused.value.message


async def test_the_token_is_accepted_as_x_api_key(
    api_url: str, token_for: TokenFactory, tenant: str, catalog: Catalog
) -> None:
    token = await token_for(tenant)
    async with AsyncAnthropic(
        base_url=api_url, api_key=None, default_headers={"X-Api-Key": token}, max_retries=0
    ) as c:
        message = await c.messages.create(
            model=catalog.profile("openai"),
            max_tokens=50,
            messages=[{"role": "user", "content": "by api key"}],
        )
    assert _text(message) == "Echo: by api key"
    async with AsyncAnthropic(
        base_url=api_url, api_key=None, default_headers={"X-Api-Key": "nope"}, max_retries=0
    ) as c:
        with pytest.raises(anthropic.AuthenticationError) as refused:
            await c.messages.create(
                model=catalog.profile("openai"),
                max_tokens=50,
                messages=[{"role": "user", "content": "x"}],
            )
    assert refused.value.type == "authentication_error"


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_stream_read_with_the_sdk_helper(
    client: AsyncAnthropic,
    catalog: Catalog,
    sessions: async_sessionmaker[AsyncSession],
    protocol: str,
) -> None:
    key = f"msg-stream-{uuid.uuid4().hex}"
    kinds: list[str] = []
    async with client.messages.stream(
        model=catalog.profile(protocol),
        max_tokens=200,
        messages=[{"role": "user", "content": "stream these words please"}],
        extra_headers={"Idempotency-Key": key},
    ) as stream:
        async for event in stream:
            kinds.append(event.type)
        final = await stream.get_final_message()
    assert _text(final) == "Echo: stream these words please"
    assert final.stop_reason == "end_turn"
    # The SDK's order, and only the Messages API's own event types.
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert kinds.index("content_block_start") < kinds.index("content_block_stop")
    assert kinds.index("content_block_stop") < kinds.index("message_delta")
    assert kinds.index("message_delta") == len(kinds) - 2
    assert "model_router" not in kinds  # the receipt rides on message_delta (the raw test)
    row = await receipt(sessions, catalog.tenant, key)
    assert row.outcome == "Completed"
    _usage_matches(final.usage, row)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_the_receipt_rides_on_message_delta_in_the_raw_stream(
    client: AsyncAnthropic, catalog: Catalog, protocol: str
) -> None:
    stream = await client.messages.create(
        model=catalog.profile(protocol),
        max_tokens=100,
        messages=[{"role": "user", "content": "raw"}],
        stream=True,
    )
    events = [event async for event in stream]
    # Our estimate of the input where the Messages API reports it; message_delta corrects it.
    start: Any = next(e for e in events if e.type == "message_start")
    assert start.message.usage.input_tokens > 0
    # The receipt rides on message_delta as a field the SDK keeps; no event is of a type the
    # SDK would cast to one of its classes without the fields that class has.
    assert {e.type for e in events} <= MESSAGES_EVENTS
    assert not any(isinstance(e, RawMessageStartEvent) and e.message is None for e in events)
    delta: Any = next(e for e in events if e.type == "message_delta")
    extra = (delta.model_extra or {})["model_router"]
    assert extra["deploymentId"] == catalog.deployment(protocol)
    assert extra["outcome"] == "Completed" and extra["receiptId"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_tool_round_trip(client: AsyncAnthropic, catalog: Catalog, protocol: str) -> None:
    ask: Any = [{"role": "user", "content": "weather in Paris?"}]
    first = await client.messages.create(
        model=catalog.profile(protocol),
        max_tokens=200,
        messages=ask,
        tools=[WEATHER],
        tool_choice={"type": "any"},
    )
    assert first.stop_reason == "tool_use"
    [call] = [b for b in first.content if b.type == "tool_use"]
    assert call.name == "get_weather" and isinstance(call.input["city"], str)
    follow: Any = [
        *ask,
        {"role": "assistant", "content": [b.model_dump() for b in first.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny, 21C"}],
        },
    ]
    async with client.messages.stream(
        model=catalog.profile(protocol), max_tokens=200, messages=follow, tools=[WEATHER]
    ) as stream:
        final = await stream.get_final_message()
    assert _text(final) == "Tool result received: sunny, 21C"

    # A failed tool, as coding agents report every failed command: it was refused (422), and
    # the session with it. Anthropic takes the flag; OpenAI has none and reads it in the text.
    follow[-1]["content"][0] |= {"content": "city not found", "is_error": True}
    failed = await client.messages.create(
        model=catalog.profile(protocol), max_tokens=200, messages=follow, tools=[WEATHER]
    )
    said = {
        "anthropic": "Tool error received: city not found",
        "openai": "Tool result received: Error: city not found",
    }
    assert _text(failed) == said[protocol]


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_json_through_a_forced_tool(
    client: AsyncAnthropic, catalog: Catalog, protocol: str
) -> None:
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "integer"}, "unit": {"type": "string"}},
        "required": ["answer", "unit"],
        "additionalProperties": False,
    }
    tool: Any = {"name": "record", "input_schema": schema}
    async with client.messages.stream(
        model=catalog.profile(protocol),
        max_tokens=200,
        messages=[{"role": "user", "content": "2+2 in apples"}],
        tools=[tool],
        tool_choice={"type": "tool", "name": "record"},
    ) as stream:
        final = await stream.get_final_message()
    [block] = final.content
    assert block.type == "tool_use" and block.name == "record"
    assert isinstance(block.input["answer"], int)
    assert isinstance(block.input["unit"], str)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_idempotency_replays_and_refuses_another_body(
    client: AsyncAnthropic, catalog: Catalog, upstream: UpstreamServer, protocol: str
) -> None:
    key = f"msg-once-{uuid.uuid4().hex}"
    before = upstream.requests(catalog.model(protocol))
    body: Any = {
        "model": catalog.profile(protocol),
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "only once"}],
        "extra_headers": {"Idempotency-Key": key},
    }
    one = await client.messages.create(**body)
    again = await client.messages.create(**body)
    async with client.messages.stream(**body) as stream:
        streamed = await stream.get_final_message()
    assert one.id == again.id == streamed.id
    assert _text(one) == _text(again) == _text(streamed) == "Echo: only once"
    assert one.usage == again.usage
    assert upstream.requests(catalog.model(protocol)) - before == 1
    # Another body under the key: a 409 the SDK does not retry (x-should-retry: false).
    async with client.with_options(max_retries=3) as retrying:
        with pytest.raises(anthropic.ConflictError) as conflict:
            await retrying.messages.create(
                **{**body, "messages": [{"role": "user", "content": "something else"}]}
            )
    assert conflict.value.type == "conflict_error"
    assert conflict.value.response.headers["x-should-retry"] == "false"
    assert upstream.requests(catalog.model(protocol)) - before == 1


async def test_a_run_follows_its_pinned_plan(
    client: AsyncAnthropic,
    http: httpx.AsyncClient,
    catalog: Catalog,
    temporal_client: Client,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    profile = f"pin-{catalog.tag}"
    first, second = catalog.deployment("openai"), f"sf/second-{catalog.tag}"
    await approved_deployment(
        http,
        catalog.auth,
        temporal_client,
        catalog.tenant,
        second,
        provider="anthropic",
        model=f"second-{catalog.tag}",
        endpointRef=upstream.endpoint_ref,
    )
    v1 = await publish(http, catalog.auth, profile_event(profile, [first], {}))
    assert v1.status_code == 200, v1.text
    run = str(uuid.uuid4())

    async def answered_by(run_id: str | None) -> str:
        headers = {"X-Run-Id": run_id} if run_id else {}
        raw = await client.messages.with_raw_response.create(
            model=profile,
            max_tokens=50,
            messages=[{"role": "user", "content": "who answers"}],
            extra_headers=headers,
        )
        row = await _receipt_by_id(sessions, raw.headers["x-model-router-receipt-id"])
        assert row.deployment_id == raw.headers["x-model-router-deployment"]
        if run_id:
            assert str(row.run_id) == run_id and row.route_plan_id is not None
        return str(row.deployment_id)

    assert await answered_by(run) == first
    v2 = await publish(http, catalog.auth, profile_event(profile, [second], {}, version="2"))
    assert v2.status_code == 200, v2.text
    assert await answered_by(run) == first  # the run keeps the plan it started with
    assert await answered_by(str(uuid.uuid4())) == second
    assert await answered_by(None) == second


async def _receipt_by_id(sessions: async_sessionmaker[AsyncSession], invocation_id: str) -> Any:
    from store.tables import InvocationReceiptRow

    async with sessions() as session:
        row = await session.get(InvocationReceiptRow, uuid.UUID(invocation_id))
    assert row is not None
    return row


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_stream_cut_after_output_is_an_error_event_and_partial(
    client: AsyncAnthropic,
    catalog: Catalog,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    protocol: str,
) -> None:
    upstream.register(
        catalog.model(protocol), lambda turn: Reply(text=" ".join(f"w{i}" for i in range(40)))
    )
    upstream.inject(catalog.model(protocol), Fault(kind=FaultKind.STREAM_CUT, after_chunks=6))
    key = f"msg-cut-{uuid.uuid4().hex}"
    seen = ""
    try:
        with pytest.raises(anthropic.APIStatusError) as failed:
            async with client.messages.stream(
                model=catalog.profile(protocol),
                max_tokens=200,
                messages=[{"role": "user", "content": "a long answer"}],
                extra_headers={"Idempotency-Key": key},
            ) as stream:
                async for text in stream.text_stream:
                    seen += text
    finally:
        upstream.register(catalog.model(protocol), default_responder)
    assert seen.startswith("w0")  # output had reached the caller
    assert failed.value.type == "api_error"
    assert "stream_incomplete" in str(failed.value.api_message)
    # Classified as on every surface's errors: a cut stream may succeed if asked again.
    assert isinstance(failed.value.body, dict) and failed.value.body["errorClass"] == "transient"
    row = await receipt(sessions, catalog.tenant, key)
    assert row.outcome == "Partial"


async def test_errors_in_anthropics_envelope(
    client: AsyncAnthropic, http: httpx.AsyncClient, catalog: Catalog
) -> None:
    with pytest.raises(anthropic.NotFoundError) as missing:
        await client.messages.create(
            model="no-such-profile", max_tokens=10, messages=[{"role": "user", "content": "x"}]
        )
    assert missing.value.type == "not_found_error"
    # Where Anthropic's error body has it: the request id the headers carry.
    said: Any = missing.value.body
    assert said["request_id"] == missing.value.response.headers["request-id"]

    async def post(body: dict[str, Any]) -> httpx.Response:
        return await http.post("/v1/messages", json=body, headers=catalog.auth)

    base = {"model": catalog.profile("openai"), "messages": [{"role": "user", "content": "x"}]}
    no_max = await post(base)
    assert no_max.status_code == 400  # as Anthropic answers it: the SDK's BadRequestError
    assert no_max.headers["content-type"].startswith("application/json")
    envelope = no_max.json()
    assert envelope["type"] == "error"
    assert envelope["error"]["type"] == "invalid_request_error"
    assert "body.max_tokens" in envelope["error"]["message"]
    # What the normalised request cannot carry is refused, naming the field.
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": ""}}
    for body, field in (
        (
            {**base, "max_tokens": 5, "messages": [{"role": "user", "content": [image]}]},
            "body.messages.0.content.0.type",
        ),
        ({**base, "max_tokens": 5, "top_k": 3}, "body.top_k"),
        # Unknown here, they were dropped: served anywhere, at any speed, cached as we chose.
        ({**base, "max_tokens": 5, "inference_geo": "eu"}, "body.inference_geo"),
        (
            {**base, "max_tokens": 5, "output_config": {"effort": "highest"}},
            "body.output_config.effort",
        ),
        (
            {
                **base,
                "max_tokens": 5,
                "tools": [{"name": "t", "input_schema": {"type": "object"}, "defer_loading": True}],
            },
            "body.tools.0.defer_loading",
        ),
        # Thinking asked for (`adaptive` only permits it: tests/test_messages_claude_code.py).
        (
            {**base, "max_tokens": 5, "thinking": {"type": "enabled", "budget_tokens": 1024}},
            "body.thinking.type",
        ),
        (
            {
                **base,
                "max_tokens": 5,
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "tool_result", "tool_use_id": "t", "is_error": "y"}],
                    }
                ],
            },
            "body.messages.0.content.0.is_error",
        ),
    ):
        refused = await post(body)
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["type"] == "invalid_request_error"
        assert field in refused.json()["error"]["message"], refused.text
        assert field in [e["field"] for e in refused.json()["errors"]]
    # Refused before any route reads the body (too deep), in the same envelope.
    deep = await http.post(
        "/v1/messages",
        content=b'{"model": "x", "max_tokens": 1, "messages": ' + b"[" * 100 + b"]" * 100 + b"}",
        headers={**catalog.auth, "content-type": "application/json"},
    )
    assert deep.status_code == 400 and deep.json()["type"] == "error", deep.text
    assert deep.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_structured_output_by_either_name_and_null_options_are_taken(
    client: AsyncAnthropic, catalog: Catalog, protocol: str
) -> None:
    """`output_format` is the structured-outputs beta's name for `output_config.format`
    (`beta.messages.parse` sends it); a client that serialises unset options as null asks for
    nothing by them. Both were refused as unknown fields."""
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    }
    answered = await client.messages.create(
        model=catalog.profile(protocol),
        max_tokens=200,
        messages=[{"role": "user", "content": "a city, as JSON"}],
        extra_body={
            "output_format": {"type": "json_schema", "schema": schema},
            "top_k": None,
            "inference_geo": None,
        },
    )
    [block] = answered.content
    assert block.type == "text" and isinstance(json.loads(block.text)["city"], str)


async def test_a_budget_denial_is_a_billing_error(
    client: AsyncAnthropic, catalog: Catalog, upstream: UpstreamServer
) -> None:
    before = upstream.requests(catalog.model("openai"))
    with pytest.raises(anthropic.APIStatusError) as denied:
        await client.messages.create(
            model=catalog.profile("openai"),
            max_tokens=50,
            messages=[{"role": "user", "content": "on a budget"}],
            extra_headers={"X-Budget-Usd": "0.000001"},  # under the worst case
        )
    assert denied.value.status_code == 402 and denied.value.type == "billing_error"
    assert denied.value.response.headers["x-model-router-receipt-id"]
    assert denied.value.body["reason"] == "over-budget"  # type: ignore[index]
    assert upstream.requests(catalog.model("openai")) == before
    fits = await client.messages.create(
        model=catalog.profile("openai"),
        max_tokens=50,
        messages=[{"role": "user", "content": "on a budget"}],
        extra_headers={"X-Budget-Usd": "100"},
    )
    assert _text(fits) == "Echo: on a budget"
    assert upstream.requests(catalog.model("openai")) == before + 1


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_text_blocks_of_an_assistant_turn_reach_the_provider_apart(
    client: AsyncAnthropic, catalog: Catalog, upstream: UpstreamServer, protocol: str
) -> None:
    """An assistant turn's text blocks are one text at the provider: joined end to end,
    "Context:" and "a.py" read "Context:a.py" (a tool result's blocks were already kept apart
    by a newline: the same rule)."""
    seen: list[ChatTurn] = []

    def record(turn: ChatTurn) -> Reply:
        seen.append(turn)
        return default_responder(turn)

    model = catalog.model(protocol)
    upstream.register(model, record)
    blocks: Any = [{"type": "text", "text": "Context:"}, {"type": "text", "text": "a.py"}]
    try:
        await client.messages.create(
            model=catalog.profile(protocol),
            max_tokens=50,
            messages=[
                {"role": "user", "content": "what is open?"},
                {"role": "assistant", "content": blocks},
                {"role": "user", "content": "go on"},
            ],
        )
    finally:
        upstream.register(model, default_responder)
    [assistant] = [m for m in seen[-1].messages if m.role == "assistant"]
    assert assistant.text == "Context:\na.py"


async def test_cache_control_reaches_anthropic_and_counts_as_cached(
    client: AsyncAnthropic,
    catalog: Catalog,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    seen: list[dict[str, Any]] = []

    def record(turn: ChatTurn) -> Reply:
        seen.append(turn.raw)
        return default_responder(turn)

    upstream.register(catalog.model("anthropic"), record)
    breakpoint = {"type": "ephemeral", "ttl": "1h"}
    system: Any = [{"type": "text", "text": "rules " * 200, "cache_control": breakpoint}]
    keys = [f"msg-cache-{uuid.uuid4().hex}" for _ in range(2)]
    try:
        for key in keys:
            message = await client.messages.create(
                model=catalog.profile("anthropic"),
                max_tokens=50,
                system=system,
                messages=[{"role": "user", "content": "cached?"}],
                extra_headers={"Idempotency-Key": key},
            )
    finally:
        upstream.register(catalog.model("anthropic"), default_responder)
    # Exactly the caller's breakpoint, as given (the adapter adds none of its own then).
    assert seen[-1]["system"] == system
    assert "cache_control" not in json.dumps(seen[-1]["messages"])
    row = await receipt(sessions, catalog.tenant, keys[-1])
    assert row.cached_input_tokens and row.cached_input_tokens > 0
    assert message.usage.cache_read_input_tokens == row.cached_input_tokens
    _usage_matches(message.usage, row)


async def test_count_tokens_from_the_deployment_or_our_estimate(
    client: AsyncAnthropic,
    catalog: Catalog,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    prompt: Any = {
        "system": "be brief",
        "messages": [{"role": "user", "content": "how many tokens is this"}],
        "tools": [WEATHER],
    }
    # An Anthropic deployment counts, and its count is what the call is then billed.
    before = upstream.requests(catalog.model("anthropic"), endpoint="count_tokens")
    raw = await client.messages.with_raw_response.count_tokens(
        model=catalog.profile("anthropic"), **prompt
    )
    counted = await raw.parse()
    assert raw.headers["x-model-router-token-count"] == "deployment"
    assert upstream.requests(catalog.model("anthropic"), endpoint="count_tokens") == before + 1
    key = f"msg-count-{uuid.uuid4().hex}"
    await client.messages.create(
        model=catalog.profile("anthropic"),
        max_tokens=50,
        tool_choice={"type": "none"},
        extra_headers={"Idempotency-Key": key},
        **prompt,
    )
    assert counted.input_tokens == (await receipt(sessions, catalog.tenant, key)).input_tokens
    # OpenAI's protocol has no counting: our estimate, and the header says so.
    raw = await client.messages.with_raw_response.count_tokens(
        model=catalog.profile("openai"), **prompt
    )
    estimated = await raw.parse()
    assert raw.headers["x-model-router-token-count"] == "estimate"
    assert estimated.input_tokens > 0
    longer = await client.messages.count_tokens(
        model=catalog.profile("openai"),
        messages=[{"role": "user", "content": "how many tokens is this " * 50}],
    )
    assert longer.input_tokens > estimated.input_tokens
    with pytest.raises(anthropic.NotFoundError):
        await client.messages.count_tokens(
            model="no-such-profile", messages=[{"role": "user", "content": "x"}]
        )


async def test_a_count_the_tenant_policy_denies_is_refused_as_the_call_is(
    client: AsyncAnthropic, catalog: Catalog, upstream: UpstreamServer
) -> None:
    """Restricted data may go to Local deployments only (the baseline policy), and the
    catalog's are Regional: the call is a 403, and the count was a 200 with our estimate."""
    prompt: Any = {"messages": [{"role": "user", "content": "how many tokens is this"}]}
    restricted = {"X-Data-Classification": "Restricted"}
    model, profile = catalog.model("anthropic"), catalog.profile("anthropic")
    before = upstream.requests(model), upstream.requests(model, endpoint="count_tokens")
    with pytest.raises(anthropic.PermissionDeniedError) as call:
        await client.messages.create(
            model=profile, max_tokens=50, extra_headers=restricted, **prompt
        )
    with pytest.raises(anthropic.PermissionDeniedError) as count:
        await client.messages.count_tokens(model=profile, extra_headers=restricted, **prompt)
    for refused in (call.value, count.value):
        body: Any = refused.body
        assert body["error"]["type"] == "permission_error"
        assert body["type"] == "error" and body["reason"] == "privacy_denied_by_policy"
    after = upstream.requests(model), upstream.requests(model, endpoint="count_tokens")
    assert after == before  # the prompt went nowhere
    # Internal data may go anywhere: counted at the deployment, as ever.
    raw = await client.messages.with_raw_response.count_tokens(
        model=profile, extra_headers={"X-Data-Classification": "Internal"}, **prompt
    )
    assert raw.headers["x-model-router-token-count"] == "deployment"


async def test_a_count_never_reaches_a_deployment_retired_since_the_last_one(
    client: AsyncAnthropic, catalog: Catalog, upstream: UpstreamServer, http: httpx.AsyncClient
) -> None:
    # The count has no receipt whose claim would check the catalog's version: it reads it.
    prompt: Any = {"messages": [{"role": "user", "content": "how many tokens is this"}]}
    model = catalog.model("anthropic")
    await client.messages.count_tokens(model=catalog.profile("anthropic"), **prompt)
    before = upstream.requests(model, endpoint="count_tokens")
    retired = await http.post(
        f"/factory/model-deployments/{catalog.deployment('anthropic')}/retire",
        headers=catalog.auth,
    )
    assert retired.status_code == 200, retired.text
    raw = await client.messages.with_raw_response.count_tokens(
        model=catalog.profile("anthropic"), **prompt
    )
    assert raw.headers["x-model-router-token-count"] == "estimate"
    assert upstream.requests(model, endpoint="count_tokens") == before  # the prompt went nowhere


@pytest.mark.parametrize("flaw", ["missing", "not_finite", "unreadable"])
async def test_a_count_the_deployment_cannot_give_is_our_estimate(
    client: AsyncAnthropic, catalog: Catalog, upstream: UpstreamServer, flaw: str
) -> None:
    # The deployment answers its count with no whole number, or with a page that is not JSON:
    # the caller gets our estimate, as from a deployment that cannot count, never a 500.
    model = catalog.model("anthropic")
    upstream.inject(
        model, Fault(kind=FaultKind.MALFORMED_ANSWER, flaw=flaw, endpoint="count_tokens")
    )
    try:
        raw = await client.messages.with_raw_response.count_tokens(
            model=catalog.profile("anthropic"), messages=[{"role": "user", "content": "count"}]
        )
    finally:
        upstream.state.clear_faults(model)
    assert raw.headers["x-model-router-token-count"] == "estimate"
    assert (await raw.parse()).input_tokens > 0


def test_requests_without_breakpoints_dump_and_hash_as_before() -> None:
    """cache_control is left out of a dump when unset: the canonical request, and so every
    existing Idempotency-Key's request hash, is what it was before the field existed."""
    from providers.types import ChatRequest, Message, Tool

    plain = ChatRequest(messages=(Message(role="user", content="x"),), tools=(Tool(name="t"),))
    dumped = plain.model_dump(mode="json")
    assert "cache_control" not in dumped["messages"][0]
    assert "cache_control" not in dumped["tools"][0]
    marked = Message(role="user", content="x", cache_control={"type": "ephemeral"})
    assert marked.model_dump(mode="json")["cache_control"] == {"type": "ephemeral"}


@pytest.mark.parametrize(
    ("fault", "status", "kind", "raised", "retry"),
    [
        (
            FaultKind.CONTENT_POLICY,
            400,
            "invalid_request_error",
            anthropic.BadRequestError,
            "false",
        ),
        (FaultKind.AUTH, 502, "api_error", anthropic.InternalServerError, "false"),
        # Each transient kind as Anthropic answers it (all were a 503 `overloaded_error`).
        (FaultKind.RATE_LIMIT, 429, "rate_limit_error", anthropic.RateLimitError, None),
        (FaultKind.OVERLOADED, 529, "overloaded_error", anthropic.OverloadedError, None),
        (FaultKind.SERVER_ERROR, 500, "api_error", anthropic.InternalServerError, None),
        (FaultKind.HANG, 504, "timeout_error", anthropic.GatewayTimeoutError, None),
    ],
)
async def test_provider_failures_keep_the_sdks_retry_logic_right(
    client: AsyncAnthropic,
    catalog: Catalog,
    upstream: UpstreamServer,
    fault: FaultKind,
    status: int,
    kind: str,
    raised: type[anthropic.APIStatusError],
    retry: str | None,
) -> None:
    upstream.inject(catalog.model("openai"), Fault(kind=fault))
    try:
        with pytest.raises(anthropic.APIStatusError) as failed:
            async with client.messages.stream(
                model=catalog.profile("openai"),
                max_tokens=50,
                messages=[{"role": "user", "content": "fails before output"}],
            ) as stream:
                await stream.get_final_message()
    finally:
        upstream.state.clear_faults(catalog.model("openai"))
    error = failed.value
    assert (error.status_code, error.type) == (status, kind)
    assert type(error) is raised
    assert error.response.headers.get("x-should-retry") == retry
    if fault is FaultKind.CONTENT_POLICY:
        # The provider's reason where the SDK shows it, not only in a member beside it.
        said: Any = error.body
        assert "safety system" in said["error"]["message"], said
    assert error.response.headers["x-model-router-receipt-id"]
    body: Any = error.body
    assert body["request_id"] == error.response.headers["request-id"]
    if retry is None:  # transient: when to come back
        assert int(error.response.headers["retry-after"]) >= 1
        assert body["errorClass"] == "transient" and body["status"] == status


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_context_overflow_says_the_prompt_is_too_long(
    client: AsyncAnthropic, catalog: Catalog, upstream: UpstreamServer, protocol: str
) -> None:
    # Anthropic's words for it, which Claude Code-style clients look for to compact and go on.
    upstream.inject(catalog.model(protocol), Fault(kind=FaultKind.CONTEXT_LENGTH))
    try:
        with pytest.raises(anthropic.BadRequestError) as failed:
            await client.messages.create(
                model=catalog.profile(protocol),
                max_tokens=50,
                messages=[{"role": "user", "content": "too long"}],
            )
    finally:
        upstream.state.clear_faults(catalog.model(protocol))
    body: Any = failed.value.body
    assert body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"].startswith("prompt is too long: ")


async def test_the_anthropic_sdk_lists_and_retrieves_profiles_as_models(
    client: AsyncAnthropic, catalog: Catalog
) -> None:
    """The anthropic SDK lists models at /v1/models, the OpenAI SDK's path: it was answered
    OpenAI's page, which it could not read. A key sent as `x-api-key` is taken there too."""
    profile = catalog.profile("anthropic")
    listed = [m async for m in client.models.list()]
    assert profile in {m.id for m in listed}
    assert all(m.type == "model" and m.display_name == m.id for m in listed)
    one = await client.models.retrieve(profile)
    assert one.id == profile and one.created_at.year == 1970
    with pytest.raises(anthropic.NotFoundError):
        await client.models.retrieve("no-such-profile")
    key = client.api_key
    async with httpx.AsyncClient(base_url=str(client.base_url)) as raw:
        page = await raw.get(
            "/v1/models", headers={"x-api-key": key or "", "anthropic-version": "2023-06-01"}
        )
    assert page.status_code == 200 and page.json()["first_id"], page.text


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_full_context_window_is_its_own_stop_reason(
    client: AsyncAnthropic, catalog: Catalog, upstream: UpstreamServer, protocol: str
) -> None:
    """An Anthropic deployment that stopped because the context window was full said so
    (`model_context_window_exceeded`); it reached the caller as `max_tokens`, and a client
    raised max_tokens and went on, in vain. An OpenAI deployment says `length` for both."""
    model = catalog.model(protocol)
    upstream.register(model, lambda turn: Reply(text="so far", finish_reason="context_window"))
    expected = "model_context_window_exceeded" if protocol == "anthropic" else "max_tokens"
    key = {"Idempotency-Key": f"ctx-{uuid.uuid4().hex}"}
    call: Any = {
        "model": catalog.profile(protocol),
        "max_tokens": 50,
        "messages": [{"role": "user", "content": "a long one"}],
    }
    try:
        whole = await client.messages.create(**call, extra_headers=key)
        async with client.messages.stream(**call) as stream:
            streamed = await stream.get_final_message()
        replayed = await client.messages.create(**call, extra_headers=key)
    finally:
        upstream.register(model, default_responder)
    assert whole.stop_reason == streamed.stop_reason == replayed.stop_reason == expected
