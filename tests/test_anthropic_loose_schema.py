"""A json_schema format that is not strict (OpenAI's default; LangChain's
`with_structured_output(method="json_schema")` sends it) on an Anthropic deployment: asked for
through the answer tool JSON mode uses, the caller's schema as its `input_schema` as given, and
read back as the message's text, finish `stop`. Sent as `output_config.format`, the SDK's
transform closed every object, and a map field (pydantic's `dict[str, float]`,
`additionalProperties: {"type": "number"}`) could only be answered `{}`: the caller's data
silently dropped, where OpenAI honours such a field under `strict: false`. A strict format, the
Messages surface's `output_config.format` and a schema whose top level no tool's input can be
still go as `output_config.format` (providers/anthropic_json_mode.py).

The openai SDK is the client of /v1/chat/completions and /v1/responses, the anthropic SDK of
/v1/messages; the adapter reaches the local upstream through the anthropic SDK."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from anthropic import AsyncAnthropic
from openai import AsyncOpenAI
from openai.types.responses import Response
from pydantic import BaseModel

from providers.anthropic_convert import convert
from providers.anthropic_json_mode import ANSWER_TOOL
from providers.types import ChatRequest, Message, ResponseFormat, Tool, ToolChoice
from providers.upstream import ChatTurn, Reply, ToolCallReply, UpstreamServer, default_responder
from tests.helpers.surfaces import Catalog


# What LangChain's with_structured_output sends for a pydantic model with a map field (no
# docstring: it would be the schema's description).
class Scores(BaseModel):
    player: str
    scores: dict[str, float]


SCORES = Scores.model_json_schema()
MAP = {"type": "object", "additionalProperties": {"type": "number"}}
ANSWER = {"player": "Zoë", "scores": {"math": 9.5, "art": 7.0}}
ASK: Any = [{"role": "user", "content": "Zoë's scores, as JSON."}]
WEATHER: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def _format(strict: bool | None, schema: dict[str, Any] = SCORES) -> Any:
    spec: dict[str, Any] = {"name": "Scores", "schema": schema}
    if strict is not None:
        spec["strict"] = strict
    return {"type": "json_schema", "json_schema": spec}


def claude(turn: ChatTurn) -> Reply:
    """As Claude answers: with the answer tool when it is offered (the map filled in), as the
    default otherwise (a strict format's closed map can only be `{}`)."""
    if any(t.name == ANSWER_TOOL for t in turn.tools) and turn.tool_choice in ("tool", "required"):
        return Reply(tool_calls=[ToolCallReply(name=ANSWER_TOOL, arguments=ANSWER)])
    return default_responder(turn)


@pytest.fixture
def turns(upstream: UpstreamServer, catalog: Catalog) -> Iterator[list[ChatTurn]]:
    """The requests the Anthropic-protocol model got, as the upstream parsed them."""
    seen: list[ChatTurn] = []

    def record(turn: ChatTurn) -> Reply:
        seen.append(turn)
        return claude(turn)

    upstream.register(catalog.model("anthropic"), record)
    yield seen
    upstream.register(catalog.model("anthropic"), default_responder)


async def _answer(openai_sdk: AsyncOpenAI, stream: bool, **ask: Any) -> tuple[str, list[Any], str]:
    """The message's text, its tool calls and its finish reason, whole or streamed."""
    if not stream:
        completion = await openai_sdk.chat.completions.create(messages=ASK, **ask)
        choice = completion.choices[0]
        return (
            choice.message.content or "",
            list(choice.message.tool_calls or []),
            choice.finish_reason,
        )
    text: list[str] = []
    calls: list[Any] = []
    finish = ""
    async for chunk in await openai_sdk.chat.completions.create(messages=ASK, stream=True, **ask):
        for delta in chunk.choices:
            text.append(delta.delta.content or "")
            calls += delta.delta.tool_calls or []
            finish = delta.finish_reason or finish
    return "".join(text), calls, finish


@pytest.mark.parametrize("strict", [None, False])
@pytest.mark.parametrize("stream", [False, True])
async def test_a_loose_schema_goes_as_the_answer_tool_and_keeps_its_map(
    openai_sdk: AsyncOpenAI,
    catalog: Catalog,
    turns: list[ChatTurn],
    stream: bool,
    strict: bool | None,
) -> None:
    text, calls, finish = await _answer(
        openai_sdk, stream, model=catalog.profile("anthropic"), response_format=_format(strict)
    )
    # The map's data comes back, as the message's JSON text: no tool call, finish stop.
    assert json.loads(text) == ANSWER
    assert calls == [] and finish == "stop"
    [turn] = turns
    assert "output_config" not in turn.raw
    [tool] = turn.raw["tools"]
    assert tool["name"] == ANSWER_TOOL and "strict" not in tool
    # The caller's schema as given: the map's value schema kept, no object closed.
    assert tool["input_schema"] == SCORES
    assert tool["input_schema"]["properties"]["scores"]["additionalProperties"] == {
        "type": "number"
    }
    assert turn.raw["tool_choice"] == {
        "type": "tool",
        "name": ANSWER_TOOL,
        "disable_parallel_tool_use": True,
    }


@pytest.mark.parametrize("stream", [False, True])
async def test_a_strict_schema_still_goes_as_the_output_format(
    openai_sdk: AsyncOpenAI, catalog: Catalog, turns: list[ChatTurn], stream: bool
) -> None:
    """Strict is constrained decoding, in the subset Anthropic's structured outputs take:
    the map closed (as OpenAI's strict mode refuses an open one)."""
    text, calls, finish = await _answer(
        openai_sdk, stream, model=catalog.profile("anthropic"), response_format=_format(True)
    )
    assert json.loads(text)["scores"] == {} and calls == [] and finish == "stop"
    [turn] = turns
    assert "tools" not in turn.raw
    sent = turn.raw["output_config"]["format"]["schema"]
    assert sent["properties"]["scores"]["additionalProperties"] is False


async def test_with_the_callers_tools_the_model_may_call_them_or_answer(
    openai_sdk: AsyncOpenAI, catalog: Catalog, turns: list[ChatTurn]
) -> None:
    """The interplay JSON mode defines: `any` over the caller's tools and the answer tool;
    under `required` the call is the answer and the format rides as the output format."""
    base: Any = {"model": catalog.profile("anthropic"), "response_format": _format(False)}
    text, calls, finish = await _answer(openai_sdk, False, **base, tools=[WEATHER])
    assert json.loads(text) == ANSWER and calls == [] and finish == "stop"
    _, calls, finish = await _answer(
        openai_sdk, False, **base, tools=[WEATHER], tool_choice="required"
    )
    assert [c.function.name for c in calls] == ["get_weather"] and finish == "tool_calls"
    free, forced = turns
    assert [t["name"] for t in free.raw["tools"]] == ["get_weather", ANSWER_TOOL]
    assert free.raw["tool_choice"] == {"type": "any"} and "output_config" not in free.raw
    assert [t["name"] for t in forced.raw["tools"]] == ["get_weather"]
    assert forced.raw["tool_choice"] == {"type": "any"}
    assert "output_config" in forced.raw


@pytest.mark.parametrize("stream", [False, True])
async def test_a_loose_text_format_on_responses_is_answered_as_text(
    openai_sdk: AsyncOpenAI, catalog: Catalog, turns: list[ChatTurn], stream: bool
) -> None:
    fmt: Any = {"type": "json_schema", "name": "Scores", "schema": SCORES, "strict": False}
    response: Response
    if stream:
        async with openai_sdk.responses.stream(
            model=catalog.profile("anthropic"), input="Zoë's scores", text={"format": fmt}
        ) as events:
            response = await events.get_final_response()
    else:
        response = await openai_sdk.responses.create(
            model=catalog.profile("anthropic"), input="Zoë's scores", text={"format": fmt}
        )
    assert json.loads(response.output_text) == ANSWER
    assert [item.type for item in response.output] == ["message"]
    [turn] = turns
    assert turn.raw["tools"][0]["input_schema"] == SCORES and "output_config" not in turn.raw


async def test_the_messages_surfaces_output_format_stays_constrained_decoding(
    anthropic_sdk: AsyncAnthropic, catalog: Catalog, turns: list[ChatTurn]
) -> None:
    """Anthropic's own `output_config.format` asks for constrained decoding: sent on so."""
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    }
    message = await anthropic_sdk.messages.create(
        model=catalog.profile("anthropic"),
        max_tokens=200,
        messages=[{"role": "user", "content": "a city, as JSON"}],
        output_config={"format": {"type": "json_schema", "schema": schema}},
    )
    [block] = message.content
    assert block.type == "text" and isinstance(json.loads(block.text)["city"], str)
    [turn] = turns
    assert turn.raw["output_config"]["format"]["schema"] == schema and "tools" not in turn.raw


# --- what the adapter sends, for the forms the surfaces cannot all reach ---------------------


def _request(fmt: ResponseFormat, *tools: Tool, choice: ToolChoice | None = None) -> ChatRequest:
    return ChatRequest(
        messages=(Message(role="user", content="json"),),
        tools=tools,
        tool_choice=choice,
        response_format=fmt,
    )


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "array", "items": MAP},
        {"anyOf": [MAP, {"type": "string"}]},
        {"type": "object", "oneOf": [MAP, {"type": "object"}]},
    ],
)
def test_a_top_level_no_tool_takes_keeps_the_output_format(schema: dict[str, Any]) -> None:
    """Anthropic refuses a tool's input_schema that is not an object, or has anyOf, oneOf or
    allOf at its top: such a schema goes as the output format, strict or not."""
    fmt = ResponseFormat(type="json_schema", json_schema=schema, strict=False)
    params = convert(_request(fmt), "claude")
    assert "tools" not in params and params["output_config"]["format"]["type"] == "json_schema"


def test_the_description_rides_in_the_answer_tools_schema() -> None:
    """As in the output format's: neither has a description of its own for the format."""
    fmt = ResponseFormat(
        type="json_schema", json_schema=SCORES, strict=False, description="a player's marks"
    )
    [tool] = convert(_request(fmt), "claude")["tools"]
    assert tool["input_schema"] == {**SCORES, "description": "a player's marks"}
    described = {**SCORES, "description": "the schema's own"}
    fmt = fmt.model_copy(update={"json_schema": described})
    [tool] = convert(_request(fmt), "claude")["tools"]
    assert tool["input_schema"] == described


def test_under_tool_choice_none_the_answer_tool_alone_is_forced() -> None:
    fmt = ResponseFormat(type="json_schema", json_schema=SCORES, strict=False)
    lookup = Tool(name="lookup")
    params = convert(_request(fmt, lookup, choice=ToolChoice(mode="none")), "claude")
    assert [t["name"] for t in params["tools"]] == ["lookup", ANSWER_TOOL]
    assert params["tool_choice"]["name"] == ANSWER_TOOL and "output_config" not in params
