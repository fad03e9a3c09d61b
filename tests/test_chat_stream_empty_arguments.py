"""A streamed Chat Completions tool call that carries no argument text ends with `{}`, as the
whole answer and a replay of its key give it. An Anthropic deployment's `tool_use` for a tool
without parameters streams one empty `partial_json` and nothing else; passed on as it came, the
call's arguments were `""`: the openai SDK's stream helper raised parsing a pydantic tool's
(`Invalid JSON: EOF while parsing`), and JS's `JSON.parse("")` throws. The live call gets one
chunk of `{}` once it is done, before any other call's chunk (the SDK's helper takes that as
its end); a held call is sent whole with `{}`. The openai SDK is the client, the local upstream
the provider; the writer alone is fed hand-built events, read by the SDK's own accumulator."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest
from openai import AsyncOpenAI
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk
from pydantic import BaseModel

from api.openai_stream import ChatChunks
from domain.enums import InvocationOutcome
from domain.invocation import InvocationSummary
from providers.types import Finish, TextDelta, ToolCallDelta
from providers.upstream import ChatTurn, Reply, ToolCallReply, UpstreamServer, default_responder
from tests.helpers.surfaces import Catalog


class NoArgs(BaseModel):
    """A tool without parameters (its strict schema: an object of no properties)."""


PING = openai.pydantic_function_tool(NoArgs, name="ping")
PONG = openai.pydantic_function_tool(NoArgs, name="pong")
CITY: Any = {
    "type": "function",
    "function": {
        "name": "weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


@pytest.fixture
def parameterless(upstream: UpstreamServer, catalog: Catalog) -> Iterator[str]:
    """The Anthropic-protocol model answering with a call of each tool it is given, each with
    no argument text (`arguments=""`: the simulator streams it as one empty `partial_json`, as
    Anthropic does; `arguments={}` would stream `{}`); its model's name."""
    model = catalog.model("anthropic")

    def answer(turn: ChatTurn) -> Reply:
        return Reply(tool_calls=[ToolCallReply(name=t.name, arguments="") for t in turn.tools])

    upstream.register(model, answer)
    yield model
    upstream.register(model, default_responder)


async def test_the_simulator_streams_a_parameterless_call_as_anthropic_does(
    upstream: UpstreamServer, parameterless: str
) -> None:
    """What the gateway is given below is Anthropic's shape: the call's block, then one
    `input_json_delta` whose `partial_json` is empty."""
    async with anthropic.AsyncAnthropic(
        base_url=upstream.base_url, api_key="test-key", max_retries=0, timeout=10
    ) as direct:
        events = await direct.messages.create(
            model=parameterless,
            max_tokens=50,
            messages=[{"role": "user", "content": "ping"}],
            tools=[{"name": "ping", "input_schema": {"type": "object", "properties": {}}}],
            stream=True,
        )
        deltas = [
            event.delta.partial_json
            async for event in events
            if event.type == "content_block_delta" and event.delta.type == "input_json_delta"
        ]
    assert deltas == [""]


async def _stream(openai_sdk: AsyncOpenAI, profile: str, key: str, **more: Any) -> tuple[Any, list]:
    """The SDK's stream helper's final completion and its `arguments.done` events."""
    async with openai_sdk.chat.completions.stream(
        model=profile,
        messages=[{"role": "user", "content": "ping"}],
        extra_headers={"Idempotency-Key": key},
        **more,
    ) as stream:
        done = [
            (event.name, event.arguments, event.parsed_arguments)
            async for event in stream
            if event.type == "tool_calls.function.arguments.done"
        ]
        return await stream.get_final_completion(), done


async def test_a_streamed_call_without_arguments_ends_with_an_empty_object(
    openai_sdk: AsyncOpenAI, catalog: Catalog, parameterless: str
) -> None:
    """The SDK's helper parses the pydantic tool's arguments (it raised on `""`), live and in
    the replay of the key alike."""
    key = f"noargs-{uuid.uuid4().hex}"
    for _ in ("live", "replayed"):
        final, done = await _stream(openai_sdk, catalog.profile("anthropic"), key, tools=[PING])
        [call] = final.choices[0].message.tool_calls
        assert (call.function.name, call.function.arguments) == ("ping", "{}")
        assert call.function.parsed_arguments == NoArgs()
        assert done == [("ping", "{}", NoArgs())]
        assert final.choices[0].finish_reason == "tool_calls"


async def test_a_held_call_without_arguments_is_sent_with_an_empty_object(
    openai_sdk: AsyncOpenAI, catalog: Catalog, parameterless: str
) -> None:
    """Two parameterless calls: the first streams live and gets its `{}` before the second,
    held, is sent whole with `{}`; each is done with its own arguments, in turn."""
    final, done = await _stream(
        openai_sdk,
        catalog.profile("anthropic"),
        f"noargs-{uuid.uuid4().hex}",
        tools=[PING, PONG],
        parallel_tool_calls=True,
    )
    calls = final.choices[0].message.tool_calls
    assert [(c.function.name, c.function.arguments) for c in calls] == [
        ("ping", "{}"),
        ("pong", "{}"),
    ]
    assert done == [("ping", "{}", NoArgs()), ("pong", "{}", NoArgs())]


def _call(index: int, arguments: str, name: str | None = None) -> ToolCallDelta:
    """A fragment; one with a name opens its call."""
    call_id = f"call_{index}" if name is not None else None
    return ToolCallDelta(index=index, id=call_id, name=name, arguments_delta=arguments)


async def _written(events: list[TextDelta | ToolCallDelta | Finish], include_usage: bool) -> bytes:
    invocation = uuid.uuid4()
    writer = ChatChunks(invocation, "p", include_usage)
    streamed = writer.start() + b"".join(writer.add(event) for event in events)
    summary = InvocationSummary(
        invocation_id=invocation,
        outcome=InvocationOutcome.COMPLETED,
        deployment_id="d",
        input_tokens=3,
        output_tokens=2,
    )
    return streamed + await writer.end(summary)


def _read(streamed: bytes) -> tuple[list[dict[str, Any]], Any, list[tuple[str, str]]]:
    """The chunks, and the SDK's accumulator's final completion and `arguments.done` events."""
    state: ChatCompletionStreamState[Any] = ChatCompletionStreamState(input_tools=[PING, CITY])
    chunks, done = [], []
    for line in streamed.split(b"\n"):
        if line.startswith(b"data: {"):
            chunks.append(json.loads(line.removeprefix(b"data: ")))
            for event in state.handle_chunk(ChatCompletionChunk.model_validate(chunks[-1])):
                if event.type == "tool_calls.function.arguments.done":
                    done.append((event.name, event.arguments))
    return chunks, state.get_final_completion(), done


def _arguments_sent(chunks: list[dict[str, Any]]) -> list[tuple[int, str]]:
    return [
        (call["index"], call["function"]["arguments"])
        for c in chunks
        for choice in c["choices"]
        for call in choice["delta"].get("tool_calls", [])
    ]


@pytest.mark.parametrize("include_usage", [False, True])
@pytest.mark.parametrize("finished", [True, False], ids=["finish", "no-finish"])
async def test_the_writer_ends_a_call_that_sent_no_arguments_with_an_empty_object(
    include_usage: bool, finished: bool
) -> None:
    """Anthropic's fragments for a parameterless call; the `{}` comes once, before the finish
    chunk, whether a Finish came or the stream just ended (a completed call needs none)."""
    events: list[TextDelta | ToolCallDelta | Finish] = [_call(0, "", "ping"), _call(0, "")]
    events += [Finish(reason="tool_calls")] if finished else []
    chunks, final, done = _read(await _written(events, include_usage))
    assert _arguments_sent(chunks) == [(0, ""), (0, ""), (0, "{}")]
    finish = [i for i, c in enumerate(chunks) if c["choices"] and c["choices"][0]["finish_reason"]]
    assert finish == [len(chunks) - (2 if include_usage else 1)]
    [call] = final.choices[0].message.tool_calls
    assert (call.function.arguments, call.function.parsed_arguments) == ("{}", NoArgs())
    assert done == [("ping", "{}")]


async def test_the_writer_leaves_arguments_that_were_sent_as_they_came() -> None:
    """A live call whose text came after an empty first fragment (OpenAI's own shape) gets no
    `{}`; a held call without arguments gets it, after the live call's last fragment; a held
    call with arguments keeps them."""
    events: list[TextDelta | ToolCallDelta | Finish] = [
        _call(0, "", "weather"),
        _call(1, "", "ping"),
        _call(0, '{"city":'),
        _call(2, '{"city":"Oslo"}', "weather"),
        _call(0, '"Paris"}'),
        Finish(reason="tool_calls"),
    ]
    chunks, final, done = _read(await _written(events, include_usage=False))
    assert _arguments_sent(chunks) == [
        (0, ""),
        (0, '{"city":'),
        (0, '"Paris"}'),
        (1, "{}"),
        (2, '{"city":"Oslo"}'),
    ]
    calls = final.choices[0].message.tool_calls
    assert [c.function.arguments for c in calls] == ['{"city":"Paris"}', "{}", '{"city":"Oslo"}']
    assert done == [("weather", '{"city":"Paris"}'), ("ping", "{}"), ("weather", '{"city":"Oslo"}')]
