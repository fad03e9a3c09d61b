"""JSON output on an Anthropic deployment, in forms the Messages API takes. Its structured
outputs refuse an object not closed by `additionalProperties: false` and keywords such as
`minimum` (the local upstream refuses them as Anthropic does: checked first here); so a
strict json_schema goes out as the SDK's `transform_schema` makes it, and JSON mode
(`response_format: json_object`, which the gateway sent as the open schema `{"type":
"object"}`, a 400 blaming the caller) as a tool the model answers with, read back as the
answer's text, whole and streamed alike, finish `stop`. With the caller's own tools the model
may call them or answer (`tool_choice: any`), as JSON mode with tools does on OpenAI.

The openai SDK is the client of /v1/chat/completions; the adapter reaches the local upstream
through the anthropic SDK; the adapter is also driven alone, to compare its two folds."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any, cast

import anthropic
import openai
import pytest
from openai import AsyncOpenAI

from activities.suite_mapping import to_answer, to_chat
from domain.enums import Capability
from domain.suite import Suite, SuiteAnswer, SuiteRequest, run_case_async
from domain.suite.cases.json_output import json_schema_cases
from providers.anthropic_adapter import AnthropicAdapter
from providers.anthropic_json_mode import ANSWER_TOOL, AnswerReader, output_format
from providers.completion_fold import collect_stream
from providers.errors import ErrorKind, ProviderError
from providers.secrets import UpstreamSecretBroker
from providers.types import (
    ChatRequest,
    Completion,
    Finish,
    FinishReason,
    Message,
    ProviderTimeouts,
    ResponseFormat,
    StreamEvent,
    TextDelta,
    Tool,
    ToolCallDelta,
    ToolChoice,
)
from providers.upstream import ChatTurn, Reply, ToolCallReply, UpstreamServer, default_responder
from providers.upstream.schema_fill import instance_for
from providers.upstream.state import RequestRecord
from providers.upstream.suite_responders import competent_responder, failing_responder
from tests.helpers.surfaces import Catalog

# What the model answers with the answer tool: quotes and a character beyond ASCII, so the
# whole answer's text and the streamed one are compared on more than plain words.
ANSWER = {"city": "Zürich", "days": [1, 2], "note": 'say "hi"'}
WEATHER: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
ASK: Any = [{"role": "user", "content": "The weather in Zürich, as a JSON object."}]
# A schema written for OpenAI's non-strict json_schema, sent strict: objects left open, a
# bound, a length, a nullable field as a list of types.
PERSON: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0},
        "nickname": {"type": ["string", "null"]},
        "address": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
    "required": ["name", "age"],
}
# A schema as Draft 7 writes its definitions (`definitions`, not `$defs`), its object open.
DRAFT7: dict[str, Any] = {
    "type": "object",
    "properties": {"a": {"$ref": "#/definitions/A"}},
    "required": ["a"],
    "definitions": {
        "A": {"type": "object", "properties": {"b": {"type": "string"}}, "required": ["b"]}
    },
}


def claude(turn: ChatTurn) -> Reply:
    """As Claude answers under a forced tool choice: the named tool (the answer tool with
    ANSWER); under `any` (the simulator's `required`) the caller's first tool on a fresh user
    turn and the answer tool once a tool result is in."""
    answer = next((t.name for t in turn.tools if t.name.startswith(ANSWER_TOOL)), None)
    if turn.tool_choice == "tool" and turn.tool_name == answer:
        return Reply(tool_calls=[ToolCallReply(name=answer, arguments=ANSWER)])
    if turn.tool_choice == "required" and answer is not None:
        if turn.last.role == "tool":
            return Reply(tool_calls=[ToolCallReply(name=answer, arguments=ANSWER)])
        tool = turn.tools[0]
        return Reply(
            tool_calls=[ToolCallReply(name=tool.name, arguments=instance_for(tool.parameters))]
        )
    return default_responder(turn)


@pytest.fixture
def turns(upstream: UpstreamServer, catalog: Catalog) -> Iterator[list[ChatTurn]]:
    """The requests the Anthropic-protocol model got, as the upstream parsed them, each
    answered as `claude` answers; the default answers again afterwards."""
    seen: list[ChatTurn] = []

    def record(turn: ChatTurn) -> Reply:
        seen.append(turn)
        return claude(turn)

    upstream.register(catalog.model("anthropic"), record)
    yield seen
    upstream.register(catalog.model("anthropic"), default_responder)


def _last(upstream: UpstreamServer, catalog: Catalog) -> RequestRecord:
    """The Anthropic-protocol model's last request, as the upstream's ledger lists it."""
    model = catalog.model("anthropic")
    return [r for r in upstream.state.ledger if r.model == model and r.endpoint == "messages"][-1]


def _objects(schema: object) -> Iterator[dict[str, Any]]:
    """Every object schema in `schema`, however deep."""
    if isinstance(schema, dict):
        if schema.get("type") == "object":
            yield schema
        for value in schema.values():
            yield from _objects(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from _objects(value)


def _keys(schema: object) -> set[str]:
    if isinstance(schema, dict):
        return set(schema).union(*(_keys(v) for v in schema.values()))
    if isinstance(schema, list):
        return set().union(*(_keys(v) for v in schema))
    return set()


# --- the local upstream refuses what Anthropic refuses -----------------------------------------


def _closed(properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "additionalProperties": False}


@pytest.mark.parametrize(
    ("schema", "said"),
    [
        ({"type": "object"}, "'additionalProperties' must be explicitly set to false"),
        (
            _closed({"inner": {"type": "object", "properties": {}}}),
            "schema.properties.inner: For 'object' type, 'additionalProperties'",
        ),
        (_closed({"n": {"type": "integer", "minimum": 1}}), "'minimum' is not supported"),
        (_closed({"n": {"type": "number", "multipleOf": 2}}), "'multipleOf' is not supported"),
        (_closed({"s": {"type": "string", "maxLength": 3}}), "'maxLength' is not supported"),
        (
            _closed({"a": {"type": "array", "items": {"type": "string"}, "minItems": 2}}),
            "'minItems' values other than 0 or 1",
        ),
        (_closed({"s": {"type": "string", "pattern": "^(?!x)a$"}}), "'pattern'"),
        (
            {
                "$defs": {"node": _closed({"next": {"$ref": "#/$defs/node"}})},
                "$ref": "#/$defs/node",
            },
            "recursive schemas are not supported",
        ),
        # What the transform made of DRAFT7 as given: its ref left pointing at nothing.
        (
            {**_closed({"a": {"$ref": "#/definitions/A"}}), "required": ["a"]},
            "schema.properties.a: Invalid schema: $ref '#/definitions/A' does not resolve",
        ),
    ],
)
async def test_the_upstream_refuses_a_schema_anthropic_refuses(
    upstream: UpstreamServer, schema: dict[str, Any], said: str
) -> None:
    async with anthropic.AsyncAnthropic(
        base_url=upstream.base_url, api_key="k", max_retries=0
    ) as sdk:
        with pytest.raises(anthropic.BadRequestError) as refused:
            await sdk.messages.create(
                model="claude-structured",
                max_tokens=50,
                messages=[{"role": "user", "content": "json please"}],
                output_config={"format": {"type": "json_schema", "schema": schema}},
            )
    assert refused.value.status_code == 400 and refused.value.type == "invalid_request_error"
    assert refused.value.api_message is not None
    assert refused.value.api_message.startswith("output_config.format.schema")
    assert said in refused.value.api_message


async def test_the_upstream_takes_the_suites_schemas_as_the_sdk_sends_them(
    upstream: UpstreamServer,
) -> None:
    """The evaluation's json-schema cases (a `minimum`, a `pattern`, `minItems: 1`) go out
    transformed, and are taken; a simple pattern as written is taken too."""
    async with anthropic.AsyncAnthropic(
        base_url=upstream.base_url, api_key="k", max_retries=0
    ) as sdk:
        schemas = [c.start().response_format for c in json_schema_cases()]
        for given in schemas:
            assert given is not None and given.json_schema is not None
            fmt = ResponseFormat(type="json_schema", json_schema=given.json_schema)
            message = await sdk.messages.create(
                model="claude-structured",
                max_tokens=500,
                messages=[{"role": "user", "content": "json please"}],
                output_config=cast(Any, {"format": output_format(fmt, "anthropic")}),
            )
            assert message.content[0].type == "text"
            assert isinstance(json.loads(message.content[0].text), dict)
        simple = _closed({"id": {"type": "string", "pattern": "^INV-[0-9]{4}$"}})
        await sdk.messages.create(
            model="claude-structured",
            max_tokens=50,
            messages=[{"role": "user", "content": "json please"}],
            output_config={"format": {"type": "json_schema", "schema": simple}},
        )


# --- JSON mode through the gateway -------------------------------------------------------------


async def test_json_mode_answers_a_json_object_as_text(
    openai_sdk: AsyncOpenAI, catalog: Catalog, upstream: UpstreamServer, turns: list[ChatTurn]
) -> None:
    completion = await openai_sdk.chat.completions.create(
        model=catalog.profile("anthropic"),
        response_format={"type": "json_object"},
        messages=ASK,
    )
    choice = completion.choices[0]
    assert choice.message.content is not None
    assert json.loads(choice.message.content) == ANSWER
    assert choice.message.tool_calls is None
    assert choice.finish_reason == "stop"
    # The usage is the provider's, as reported.
    record = _last(upstream, catalog)
    assert record.status == 200
    assert completion.usage is not None
    assert completion.usage.completion_tokens == record.output_tokens
    assert completion.usage.prompt_tokens == record.input_tokens
    # Sent as one tool the model must call, and no format Anthropic refuses.
    [turn] = turns
    assert [t.name for t in turn.tools] == [ANSWER_TOOL]
    assert turn.tools[0].parameters == {"type": "object"}
    assert (turn.tool_choice, turn.tool_name) == ("tool", ANSWER_TOOL)
    assert not turn.parallel_tool_calls
    assert "output_config" not in turn.raw

    streamed: list[str] = []
    finish: list[str] = []
    usage = None
    async for chunk in await openai_sdk.chat.completions.create(
        model=catalog.profile("anthropic"),
        response_format={"type": "json_object"},
        messages=ASK,
        stream=True,
        stream_options={"include_usage": True},
    ):
        usage = chunk.usage or usage
        for delta in chunk.choices:
            assert delta.delta.tool_calls is None
            streamed.append(delta.delta.content or "")
            if delta.finish_reason is not None:
                finish.append(delta.finish_reason)
    text = "".join(streamed)
    # The streamed fragments join to the text the whole answer gave.
    assert text == choice.message.content
    assert json.loads(text) == ANSWER
    assert finish == ["stop"]
    assert usage is not None and usage.completion_tokens == _last(upstream, catalog).output_tokens


@pytest.mark.parametrize("stream", [False, True])
async def test_json_mode_with_tools_calls_them_then_answers_json(
    openai_sdk: AsyncOpenAI, catalog: Catalog, turns: list[ChatTurn], stream: bool
) -> None:
    """With the caller's tools and `auto`, the model may call them (finish tool_calls) or
    answer with the JSON object (finish stop): `tool_choice: any` over both."""
    ask: dict[str, Any] = {
        "model": catalog.profile("anthropic"),
        "response_format": {"type": "json_object"},
        "tools": [WEATHER],
    }
    first = await _ask(openai_sdk, ask, ASK, stream)
    assert first["finish"] == "tool_calls" and first["calls"][0]["name"] == "get_weather"
    assert first["content"] == ""
    history = [
        *ASK,
        {"role": "assistant", "content": None, "tool_calls": first["raw_calls"]},
        {"role": "tool", "tool_call_id": first["calls"][0]["id"], "content": "12 C, sunny"},
    ]
    second = await _ask(openai_sdk, ask, history, stream)
    assert second["finish"] == "stop" and second["calls"] == []
    assert json.loads(second["content"]) == ANSWER
    for turn in turns:
        assert [t.name for t in turn.tools] == ["get_weather", ANSWER_TOOL]
        assert turn.tool_choice == "required"  # Anthropic's `any`
        assert "output_config" not in turn.raw


async def test_an_answer_and_a_call_in_one_turn_stream_as_text_and_the_first_call(
    openai_sdk: AsyncOpenAI, catalog: Catalog, upstream: UpstreamServer
) -> None:
    """Claude may answer and call a tool of the caller's at once (parallel calls): the answer
    is the text, the caller's call is call 0 of the stream, as the whole answer numbers it."""
    both = Reply(
        tool_calls=[
            ToolCallReply(name=ANSWER_TOOL, arguments=ANSWER),
            ToolCallReply(name="get_weather", arguments={"city": "Bern"}),
        ]
    )
    upstream.register(catalog.model("anthropic"), lambda turn: both)
    try:
        indices: set[int] = set()
        text: list[str] = []
        async for chunk in await openai_sdk.chat.completions.create(
            model=catalog.profile("anthropic"),
            response_format={"type": "json_object"},
            tools=[WEATHER],
            messages=ASK,
            stream=True,
        ):
            for choice in chunk.choices:
                text.append(choice.delta.content or "")
                indices |= {d.index for d in choice.delta.tool_calls or []}
    finally:
        upstream.register(catalog.model("anthropic"), default_responder)
    assert json.loads("".join(text)) == ANSWER
    assert indices == {0}


async def test_json_mode_under_tool_choice_none_answers_json_only(
    openai_sdk: AsyncOpenAI, catalog: Catalog, turns: list[ChatTurn]
) -> None:
    completion = await openai_sdk.chat.completions.create(
        model=catalog.profile("anthropic"),
        response_format={"type": "json_object"},
        tools=[WEATHER],
        tool_choice="none",
        messages=ASK,
    )
    choice = completion.choices[0]
    assert choice.message.tool_calls is None and choice.finish_reason == "stop"
    assert json.loads(choice.message.content or "") == ANSWER
    [turn] = turns
    assert [t.name for t in turn.tools] == ["get_weather", ANSWER_TOOL]
    assert (turn.tool_choice, turn.tool_name) == ("tool", ANSWER_TOOL)


async def test_json_mode_with_a_required_tool_calls_it(
    openai_sdk: AsyncOpenAI, catalog: Catalog, turns: list[ChatTurn]
) -> None:
    """A call the caller forces is the answer, which JSON mode does not shape: no answer
    tool."""
    completion = await openai_sdk.chat.completions.create(
        model=catalog.profile("anthropic"),
        response_format={"type": "json_object"},
        tools=[WEATHER],
        tool_choice="required",
        messages=ASK,
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = [c.function.name for c in choice.message.tool_calls or [] if c.type == "function"]
    assert calls == ["get_weather"]
    [turn] = turns
    assert [t.name for t in turn.tools] == ["get_weather"] and turn.tool_choice == "required"


async def _ask(
    openai_sdk: AsyncOpenAI, ask: dict[str, Any], messages: list[Any], stream: bool
) -> dict[str, Any]:
    """content, calls (id, name, arguments), raw_calls (to send back) and finish reason."""
    if not stream:
        completion = await openai_sdk.chat.completions.create(**ask, messages=messages)
        choice = completion.choices[0]
        calls = [
            {"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
            for c in choice.message.tool_calls or []
            if c.type == "function"
        ]
        content, finish = choice.message.content or "", choice.finish_reason
    else:
        parts: dict[int, dict[str, Any]] = {}
        text: list[str] = []
        finish = ""
        async for chunk in await openai_sdk.chat.completions.create(
            **ask, messages=messages, stream=True
        ):
            for choice_delta in chunk.choices:
                text.append(choice_delta.delta.content or "")
                for d in choice_delta.delta.tool_calls or []:
                    part = parts.setdefault(d.index, {"id": "", "name": "", "arguments": ""})
                    part["id"] = part["id"] or d.id or ""
                    if d.function is not None:
                        part["name"] = part["name"] or d.function.name or ""
                        part["arguments"] += d.function.arguments or ""
                finish = choice_delta.finish_reason or finish
        calls = [p for _, p in sorted(parts.items())]
        content = "".join(text)
    raw_calls = [
        {
            "id": c["id"],
            "type": "function",
            "function": {"name": c["name"], "arguments": c["arguments"]},
        }
        for c in calls
    ]
    return {"content": content, "calls": calls, "raw_calls": raw_calls, "finish": finish}


# --- json_schema through the gateway -----------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_a_schema_written_for_openai_is_sent_as_anthropic_takes_it(
    openai_sdk: AsyncOpenAI, catalog: Catalog, turns: list[ChatTurn], stream: bool
) -> None:
    # Strict: a format that is not goes as the answer tool, its schema as given
    # (tests/test_anthropic_loose_schema.py).
    spec = {"name": "person", "schema": PERSON, "strict": True}
    fmt: Any = {"type": "json_schema", "json_schema": spec}
    ask: dict[str, Any] = {"model": catalog.profile("anthropic"), "response_format": fmt}
    answer = await _ask(openai_sdk, ask, [{"role": "user", "content": "a person"}], stream)
    assert answer["finish"] == "stop"
    person = json.loads(answer["content"])
    assert isinstance(person, dict) and {"name", "age"} <= set(person)
    [turn] = turns
    sent = turn.json_schema
    assert sent is not None and "output_config" in turn.raw
    objects = list(_objects(sent))
    assert len(objects) == 2 and all(o["additionalProperties"] is False for o in objects)
    assert not {"minimum", "maxLength"} & _keys(sent)
    # Moved where the model still reads them.
    assert "minimum: 0" in sent["properties"]["age"]["description"]
    assert "maxLength: 40" in sent["properties"]["name"]["description"]
    nickname = sent["properties"]["nickname"]["anyOf"]
    assert [b["type"] for b in nickname] == ["string", "null"]


async def test_a_schema_part_without_a_type_is_refused_without_a_call(
    openai_sdk: AsyncOpenAI, catalog: Catalog, upstream: UpstreamServer, turns: list[ChatTurn]
) -> None:
    """No Anthropic structured-output schema takes a part with no type: the caller's strict
    request, refused as invalid in our words, and the provider never asked (it would refuse it
    too)."""
    schema: Any = {"type": "object", "properties": {"anything": {}}}
    before = upstream.requests(catalog.model("anthropic"))
    with pytest.raises(openai.BadRequestError) as refused:
        await openai_sdk.chat.completions.create(
            model=catalog.profile("anthropic"),
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": schema, "strict": True},
            },
            messages=[{"role": "user", "content": "anything"}],
        )
    assert "output format's JSON schema has a part without a type" in str(refused.value)
    assert upstream.requests(catalog.model("anthropic")) == before and turns == []


# --- the adapter's two folds ---------------------------------------------------------------------

LOOKUP = Tool(
    name="lookup",
    parameters={"type": "object", "properties": {"term": {"type": "string"}}},
)
CLASH = Tool(name=ANSWER_TOOL, parameters={"type": "object", "properties": {}})


def _json_mode(*tools: Tool, choice: ToolChoice | None = None) -> ChatRequest:
    return ChatRequest(
        messages=(Message(role="user", content="answer in JSON"),),
        tools=tools,
        tool_choice=choice,
        response_format=ResponseFormat(type="json_object"),
    )


def _kept(completion: Completion) -> dict[str, Any]:
    """The answer but the ids each request gets anew."""
    kept = completion.model_dump(exclude={"provider_request_id", "response_id"})
    kept["tool_calls"] = [(c.name, c.arguments) for c in completion.tool_calls]
    return kept


@pytest.fixture
async def adapter(upstream: UpstreamServer) -> AsyncIterator[AnthropicAdapter]:
    connection = await UpstreamSecretBroker().resolve(upstream.endpoint_ref)
    built = AnthropicAdapter(
        model="claude-fold", connection=connection, timeouts=ProviderTimeouts(connect=2, read=5)
    )
    try:
        yield built
    finally:
        await built.aclose()
    upstream.state.unregister("claude-fold")


@pytest.mark.parametrize(
    ("reply", "request_", "text", "calls", "finish"),
    [
        # The answer alone.
        (
            Reply(tool_calls=[ToolCallReply(name=ANSWER_TOOL, arguments=ANSWER)]),
            _json_mode(),
            json.dumps(ANSWER, separators=(",", ":"), ensure_ascii=False),
            [],
            FinishReason.STOP,
        ),
        # The answer with a call of the caller's, in one turn: the call numbered from 0.
        (
            Reply(
                tool_calls=[
                    ToolCallReply(name=ANSWER_TOOL, arguments={"a": 1}),
                    ToolCallReply(name="lookup", arguments={"term": "x"}),
                ]
            ),
            _json_mode(LOOKUP),
            '{"a":1}',
            [("lookup", '{"term":"x"}')],
            FinishReason.TOOL_CALLS,
        ),
        # A caller's tool of the answer tool's name is the caller's: the answer has another.
        (
            Reply(
                tool_calls=[
                    ToolCallReply(name=ANSWER_TOOL, arguments={}),
                    ToolCallReply(name=f"{ANSWER_TOOL}_1", arguments={"b": 2}),
                ]
            ),
            _json_mode(CLASH),
            '{"b":2}',
            [(ANSWER_TOOL, "{}")],
            FinishReason.TOOL_CALLS,
        ),
        # The answer tool called twice (`tool_choice: any` lets the model): the first is the
        # answer, the second is dropped, neither a call of the caller's nor its finish.
        (
            Reply(
                tool_calls=[
                    ToolCallReply(name=ANSWER_TOOL, arguments={}),
                    ToolCallReply(name=ANSWER_TOOL, arguments={"x": 1}),
                ]
            ),
            _json_mode(LOOKUP),
            "{}",
            [],
            FinishReason.STOP,
        ),
        (
            Reply(
                tool_calls=[
                    ToolCallReply(name=ANSWER_TOOL, arguments={}),
                    ToolCallReply(name=ANSWER_TOOL, arguments={"x": 1}),
                    ToolCallReply(name="lookup", arguments={"term": "x"}),
                ]
            ),
            _json_mode(LOOKUP),
            "{}",
            [("lookup", '{"term":"x"}')],
            FinishReason.TOOL_CALLS,
        ),
    ],
)
async def test_the_stream_and_the_whole_message_fold_alike(
    adapter: AnthropicAdapter,
    upstream: UpstreamServer,
    reply: Reply,
    request_: ChatRequest,
    text: str,
    calls: list[tuple[str, str]],
    finish: FinishReason,
) -> None:
    upstream.register("claude-fold", lambda turn: reply)
    whole = await adapter.complete(request_)
    streamed = await collect_stream(adapter.stream(request_))
    assert _kept(streamed) == _kept(whole)
    assert whole.text == text and whole.finish_reason is finish
    assert [(c.name, c.arguments) for c in whole.tool_calls] == calls
    assert whole.usage is not None and whole.usage.output_tokens > 0


async def test_an_untyped_schema_part_is_an_invalid_request(adapter: AnthropicAdapter) -> None:
    fmt = ResponseFormat(
        type="json_schema", json_schema={"type": "object", "properties": {"x": {}}}
    )
    request = ChatRequest(messages=(Message(role="user", content="x"),), response_format=fmt)
    with pytest.raises(ProviderError) as whole:
        await adapter.complete(request)
    with pytest.raises(ProviderError) as streamed:
        await collect_stream(adapter.stream(request))
    assert whole.value.kind is streamed.value.kind is ErrorKind.INVALID_REQUEST
    assert whole.value.provider == "anthropic"


@pytest.mark.parametrize("with_call", [False, True])
async def test_an_answer_streamed_without_input_is_the_empty_object(
    adapter: AnthropicAdapter, upstream: UpstreamServer, with_call: bool
) -> None:
    """A tool_use of empty input streams one empty `partial_json`; its whole message says
    `input: {}`. Both are the text `{}`, said before a call of the caller's that follows."""
    request = _json_mode(LOOKUP) if with_call else _json_mode()
    call = [ToolCallReply(name="lookup", arguments={"term": "x"})] if with_call else []
    empty = ToolCallReply(name=ANSWER_TOOL, arguments="")
    streamed_reply = Reply(tool_calls=[empty, *call], verbatim=True)
    whole_reply = Reply(tool_calls=[empty.model_copy(update={"arguments": {}}), *call])
    upstream.register("claude-fold", lambda turn: streamed_reply)
    streamed = await collect_stream(adapter.stream(request))
    upstream.register("claude-fold", lambda turn: whole_reply)
    whole = await adapter.complete(request)
    # (Usage aside: the two replies differ in what the simulator counts.)
    assert {**_kept(streamed), "usage": None} == {**_kept(whole), "usage": None}
    assert whole.text == "{}" and [c.name for c in whole.tool_calls] == [c.name for c in call]
    assert whole.text_at_calls == ()  # the text came before the call, as in the stream


def _call(index: int, name: str, arguments: str, whole: bool) -> list[StreamEvent]:
    """A tool call's events as the adapter gives them: a whole message's in one, a stream's
    as its head then its input's fragment."""
    if whole:
        return [ToolCallDelta(index=index, id=f"t{index}", name=name, arguments_delta=arguments)]
    return [
        ToolCallDelta(index=index, id=f"t{index}", name=name),
        ToolCallDelta(index=index, arguments_delta=arguments),
    ]


@pytest.mark.parametrize("whole", [False, True])
@pytest.mark.parametrize("with_call", [False, True])
def test_a_later_call_of_the_answer_tool_is_dropped(whole: bool, with_call: bool) -> None:
    """Passed on, the second call was a call of `json_output`, a tool the caller never
    declared, with finish `tool_calls` asking the caller to run it."""
    lookup = _call(2, "lookup", '{"term":"x"}', whole) if with_call else []
    events: list[StreamEvent] = [
        *_call(0, ANSWER_TOOL, "{}", whole),
        *_call(1, ANSWER_TOOL, '{"x":1}', whole),
        *lookup,
        Finish(reason=FinishReason.TOOL_CALLS),
    ]
    reader = AnswerReader(ANSWER_TOOL, whole=whole)
    out = [read for event in events for read in reader.read(event)]
    assert "".join(e.text for e in out if isinstance(e, TextDelta)) == "{}"
    # The caller's call is its call 0, as if the answer tool had been called once.
    assert [e for e in out if isinstance(e, ToolCallDelta)] == [
        e.model_copy(update={"index": 0}) for e in lookup
    ]
    finish = FinishReason.TOOL_CALLS if with_call else FinishReason.STOP
    assert [e.reason for e in out if isinstance(e, Finish)] == [finish]


# --- Draft 7's definitions ---------------------------------------------------------------------


def test_draft7_definitions_go_as_defs_closed_and_pointed_at() -> None:
    """The transform keeps `$defs` only: `definitions` went into the description, A open, and
    the ref pointed at nothing (Anthropic's 400, as the upstream's above)."""
    sent = output_format(ResponseFormat(type="json_schema", json_schema=DRAFT7), "anthropic")
    schema = sent["schema"]
    assert schema["properties"]["a"] == {"$ref": "#/$defs/A"}
    assert schema["$defs"]["A"]["additionalProperties"] is False
    assert schema["$defs"]["A"]["properties"] == {"b": {"type": "string"}}
    assert "definitions" not in schema and "definitions" not in schema.get("description", "")
    # Nested definitions too, and a property named `definitions` is a property.
    nested: dict[str, Any] = {
        "type": "object",
        "properties": {
            "p": {"$ref": "#/definitions/N/definitions/B"},
            "definitions": {"type": "string"},
            "q": {"$ref": "#/properties/definitions"},
        },
        "definitions": {
            "N": {"type": "object", "properties": {}, "definitions": {"B": {"type": "integer"}}}
        },
    }
    fmt = ResponseFormat(type="json_schema", json_schema=nested)
    moved = output_format(fmt, "anthropic")["schema"]
    assert moved["properties"]["p"] == {"$ref": "#/$defs/N/$defs/B"}
    assert moved["properties"]["q"] == {"$ref": "#/properties/definitions"}
    assert moved["$defs"]["N"]["$defs"]["B"] == {"type": "integer"}


@pytest.mark.parametrize("stream", [False, True])
async def test_a_draft7_schema_is_taken_and_answered(
    adapter: AnthropicAdapter, upstream: UpstreamServer, stream: bool
) -> None:
    upstream.register("claude-fold", default_responder)
    fmt = ResponseFormat(type="json_schema", json_schema=DRAFT7)
    request = ChatRequest(messages=(Message(role="user", content="an a"),), response_format=fmt)
    if stream:
        completion = await collect_stream(adapter.stream(request))
    else:
        completion = await adapter.complete(request)
    answer = json.loads(completion.text)
    assert isinstance(answer["a"]["b"], str) and completion.finish_reason is FinishReason.STOP


# --- the evaluation's JSON-mode cases ----------------------------------------------------------

SUITE = Suite(max_context_tokens=4096)
JSON_MODE = {Capability.STRICT_JSON, Capability.PLANNING}


@pytest.mark.parametrize("stream", [False, True])
async def test_the_suites_json_mode_cases_are_answered_with_the_answer_tool(
    adapter: AnthropicAdapter, upstream: UpstreamServer, stream: bool
) -> None:
    """On the Anthropic protocol the suite's JSON-mode cases go out as a forced answer tool:
    the simulated model answers with its call, as Claude does, and the case passes on the
    call read back as text (answered as text, the cases passed with no call to read)."""
    cases = [c for c in SUITE.cases if c.capability in JSON_MODE]
    assert {c.capability for c in cases} == JSON_MODE
    competent = competent_responder(SUITE)
    answered: list[tuple[ChatTurn, Reply]] = []

    def record(turn: ChatTurn) -> Reply:
        reply = competent(turn)
        assert isinstance(reply, Reply)
        answered.append((turn, reply))
        return reply

    completions: list[Completion] = []

    async def ask(request: SuiteRequest) -> SuiteAnswer:
        chat = to_chat(request)
        completion = await (
            collect_stream(adapter.stream(chat)) if stream else adapter.complete(chat)
        )
        completions.append(completion)
        return to_answer(completion)

    upstream.register("claude-fold", record)
    results = [await run_case_async(case, ask) for case in cases]
    assert [r.case_id for r in results if not r.passed] == []
    assert len(answered) == len(completions) == len(cases)
    for turn, reply in answered:
        assert (turn.tool_choice, turn.tool_name) == ("tool", ANSWER_TOOL)
        assert reply.text == "" and [c.name for c in reply.tool_calls] == [ANSWER_TOOL]
    for completion in completions:
        assert isinstance(json.loads(completion.text), dict)
        assert completion.tool_calls == () and completion.finish_reason is FinishReason.STOP

    # A near miss still reaches the verifiers and fails: a JSON object of the wrong shape
    # through the tool, text that is no object (an array, a Python dict) as the text it is.
    upstream.register("claude-fold", failing_responder(SUITE, JSON_MODE))
    missed = [await run_case_async(case, ask) for case in cases]
    assert [r.case_id for r in missed if r.passed] == []
