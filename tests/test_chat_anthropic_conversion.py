"""What Chat Completions takes and an Anthropic deployment would refuse, converted on the way
(providers/anthropic_convert.py): a strict function tool's schema with keywords OpenAI's strict
mode takes (`minimum`, `maxLength`, `minItems` 2 …) goes in the subset Anthropic's strict tool
use takes, as a json_schema format's does (the keywords moved into descriptions); a temperature
above Anthropic's 1 (OpenAI's reaches 2) is clamped to 1. Sent as given, each was a 400 from an
Anthropic deployment after the key was claimed, where an OpenAI deployment answered the same
request. The local upstream refuses both as Anthropic does (checked first here).

The openai SDK is the client of /v1/chat/completions; the anthropic SDK the local upstream's,
where it is asked directly."""

from __future__ import annotations

import json
from typing import Any, cast

import anthropic
import openai
import pytest
from openai import AsyncOpenAI

from providers.upstream import UpstreamServer
from tests.helpers.surfaces import Catalog

# A strict tool as OpenAI's strict mode takes it: every object closed, every property
# required, a nullable field as a list of types, and constraints Anthropic's strict tools refuse.
BOOKING: dict[str, Any] = {
    "type": "object",
    "properties": {
        "guests": {"type": "integer", "minimum": 1, "maximum": 8},
        "name": {"type": "string", "minLength": 1, "maxLength": 40},
        "nights": {"type": "array", "items": {"type": "string", "format": "date"}, "minItems": 2},
        "note": {"type": ["string", "null"]},
    },
    "required": ["guests", "name", "nights", "note"],
    "additionalProperties": False,
}
# A tool that is not strict: any schema is taken, so it goes as given.
LOOKUP: dict[str, Any] = {
    "type": "object",
    "properties": {"n": {"type": "integer", "minimum": 0}},
}
ASK: Any = [{"role": "user", "content": "Book a room for two."}]


def _tool(name: str, parameters: dict[str, Any], strict: bool) -> Any:
    return {
        "type": "function",
        "function": {"name": name, "parameters": parameters, "strict": strict},
    }


def _keys(schema: object) -> set[str]:
    if isinstance(schema, dict):
        return set(schema).union(*(_keys(v) for v in schema.values()))
    if isinstance(schema, list):
        return set().union(*(_keys(v) for v in schema))
    return set()


# --- the local upstream refuses what Anthropic refuses -----------------------------------------


async def test_the_upstream_refuses_a_strict_tools_schema_anthropic_refuses(
    upstream: UpstreamServer,
) -> None:
    """As for a format's schema: a strict tool's `minimum` is a 400 naming where it is; the
    same schema on a tool that is not strict is taken."""
    async with anthropic.AsyncAnthropic(
        base_url=upstream.base_url, api_key="k", max_retries=0
    ) as sdk:

        async def ask(strict: bool) -> anthropic.types.Message:
            tool = {"name": "book_room", "input_schema": BOOKING, "strict": strict}
            return await sdk.messages.create(
                model="claude-strict",
                max_tokens=200,
                messages=[{"role": "user", "content": "book"}],
                tools=cast(Any, [tool]),
            )

        with pytest.raises(anthropic.BadRequestError) as refused:
            await ask(strict=True)
        assert (await ask(strict=False)).stop_reason == "tool_use"
    assert refused.value.status_code == 400 and refused.value.type == "invalid_request_error"
    assert refused.value.api_message == (
        "tools.0.custom.input_schema.properties.guests: "
        "For 'integer' type, property 'minimum' is not supported"
    )


async def test_the_upstream_refuses_a_temperature_above_anthropics(
    upstream: UpstreamServer,
) -> None:
    async with anthropic.AsyncAnthropic(
        base_url=upstream.base_url, api_key="k", max_retries=0
    ) as sdk:
        with pytest.raises(anthropic.BadRequestError) as refused:
            await sdk.messages.create(
                model="claude-warm",
                max_tokens=50,
                messages=[{"role": "user", "content": "hello"}],
                # Not a typed argument of this SDK's messages.create (as the adapter sends it).
                extra_body={"temperature": 1.5},
            )
        taken = await sdk.messages.create(
            model="claude-warm",
            max_tokens=50,
            messages=[{"role": "user", "content": "hello"}],
            extra_body={"temperature": 1},
        )
    assert refused.value.api_message == "temperature: range: 0..1"
    assert taken.stop_reason == "end_turn"


# --- through the gateway -----------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_a_strict_tool_reaches_an_anthropic_deployment_in_the_schema_it_takes(
    openai_sdk: AsyncOpenAI, catalog: Catalog, seen: dict[str, list[dict[str, Any]]], stream: bool
) -> None:
    tools = [_tool("book_room", BOOKING, strict=True), _tool("lookup", LOOKUP, strict=False)]
    calls: list[tuple[str, str]] = []
    finish: str | None = None
    if stream:
        async for chunk in await openai_sdk.chat.completions.create(
            model=catalog.profile("anthropic"),
            messages=ASK,
            tools=tools,
            tool_choice="required",
            stream=True,
        ):
            for choice in chunk.choices:
                for call in choice.delta.tool_calls or []:
                    if call.function is not None and call.function.name:
                        calls.append((call.function.name, ""))
                    if call.function is not None and call.function.arguments:
                        name, said = calls[-1]
                        calls[-1] = (name, said + call.function.arguments)
                finish = choice.finish_reason or finish
    else:
        completion = await openai_sdk.chat.completions.create(
            model=catalog.profile("anthropic"), messages=ASK, tools=tools, tool_choice="required"
        )
        message = completion.choices[0].message
        calls = [
            (c.function.name, c.function.arguments)
            for c in message.tool_calls or []
            if c.type == "function"
        ]
        finish = completion.choices[0].finish_reason
    # It was a 400 (invalid_request: the caller blamed, no fallback) from the deployment.
    assert finish == "tool_calls"
    [(name, arguments)] = calls
    assert name == "book_room" and isinstance(json.loads(arguments), dict)

    [body] = seen["anthropic"]
    strict, loose = body["tools"]
    assert strict["strict"] is True and "strict" not in loose
    sent = strict["input_schema"]
    assert not {"minimum", "maximum", "minLength", "maxLength"} & _keys(sent)
    # Moved where the model still reads them; what Anthropic takes stays a constraint.
    properties = sent["properties"]
    assert "minimum: 1" in properties["guests"]["description"]
    assert "maximum: 8" in properties["guests"]["description"]
    assert "maxLength: 40" in properties["name"]["description"]
    assert "minItems: 2" in properties["nights"]["description"]
    assert properties["nights"]["items"] == {"type": "string", "format": "date"}
    assert [b["type"] for b in properties["note"]["anyOf"]] == ["string", "null"]
    assert sent["additionalProperties"] is False and sent["required"] == BOOKING["required"]
    # A tool that is not strict takes any schema, at Anthropic too: as given.
    assert loose["input_schema"] == LOOKUP


async def test_a_strict_tools_schema_anthropic_cannot_take_is_refused_without_a_call(
    openai_sdk: AsyncOpenAI, catalog: Catalog, upstream: UpstreamServer
) -> None:
    """A part without a type is no schema Anthropic's strict tools take: the caller's request,
    refused as invalid in our words, naming the tool, and the provider never asked."""
    schema = {**BOOKING, "properties": {**BOOKING["properties"], "anything": {}}}
    before = upstream.requests(catalog.model("anthropic"))
    with pytest.raises(openai.BadRequestError) as refused:
        await openai_sdk.chat.completions.create(
            model=catalog.profile("anthropic"),
            messages=ASK,
            tools=[_tool("book_room", schema, strict=True)],
        )
    assert "the JSON schema of strict tool 'book_room' has a part without a type" in str(
        refused.value
    )
    assert upstream.requests(catalog.model("anthropic")) == before


async def test_a_temperature_above_anthropics_is_clamped_to_its_highest(
    openai_sdk: AsyncOpenAI, catalog: Catalog, seen: dict[str, list[dict[str, Any]]]
) -> None:
    """Clamped, not scaled: a temperature Anthropic takes goes as given, and an OpenAI
    deployment is sent the caller's."""
    for temperature in (1.5, 2.0, 0.7, 1.0):
        for protocol in ("anthropic", "openai"):
            completion = await openai_sdk.chat.completions.create(
                model=catalog.profile(protocol), messages=ASK, temperature=temperature
            )
            assert completion.choices[0].finish_reason == "stop", (protocol, temperature)
    assert [b["temperature"] for b in seen["anthropic"]] == [1.0, 1.0, 0.7, 1.0]
    assert [b["temperature"] for b in seen["openai"]] == [1.5, 2.0, 0.7, 1.0]
