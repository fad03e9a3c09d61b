"""Text a model says after its tool calls in the same turn, as real providers answer it:
Anthropic's content blocks [text, tool_use, text], whole and streamed; an OpenAI-compatible
server's (vLLM's) content deltas after its tool_calls deltas. First the local upstream's wire
(the real SDKs straight at it), then our surfaces over it: /v1/responses (the openai SDK)
keeps the items in that order, message, function_call, message, whole and streamed;
/v1/messages (the anthropic SDK) keeps the blocks [text, tool_use, text]."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anthropic
import pytest
from openai import AsyncOpenAI

from providers.upstream import Reply, ToolCallReply, UpstreamServer, default_responder, fixed
from providers.upstream.tokens import count_tokens
from tests.conftest import TokenFactory
from tests.helpers.surfaces import PROTOCOLS, Catalog

BEFORE, AFTER = "Let me check.", "Asked."
CALL = ToolCallReply(name="get_weather", arguments={"city": "Paris"})
REPLY = Reply(text=BEFORE, tool_calls=[CALL], text_after_calls=AFTER)
PARAMETERS: Any = {"type": "object", "properties": {"city": {"type": "string"}}}
# The same tool in each API's shape.
RESPONSES_TOOL: Any = {"type": "function", "name": "get_weather", "parameters": PARAMETERS}
MESSAGES_TOOL: Any = {"name": "get_weather", "input_schema": PARAMETERS}
CHAT_TOOL: Any = {"type": "function", "function": {"name": "get_weather", "parameters": PARAMETERS}}
ASK: Any = [{"role": "user", "content": "weather in Paris?"}]


@pytest.fixture
def answering(upstream: UpstreamServer, catalog: Catalog) -> Iterator[Catalog]:
    """The catalog, its models answering text, a call, and text after the call."""
    for protocol in PROTOCOLS:
        upstream.register(catalog.model(protocol), fixed(REPLY))
    yield catalog
    for protocol in PROTOCOLS:
        upstream.register(catalog.model(protocol), default_responder)


@pytest.fixture
async def responses(
    api_url: str, token_for: TokenFactory, tenant: str
) -> AsyncIterator[AsyncOpenAI]:
    async with AsyncOpenAI(
        base_url=f"{api_url}/v1", api_key=await token_for(tenant), max_retries=0
    ) as c:
        yield c


@pytest.fixture
async def messages(
    api_url: str, token_for: TokenFactory, tenant: str
) -> AsyncIterator[anthropic.AsyncAnthropic]:
    async with anthropic.AsyncAnthropic(
        base_url=api_url, api_key=await token_for(tenant), max_retries=0
    ) as c:
        yield c


@pytest.fixture
def model(upstream: UpstreamServer) -> Iterator[str]:
    """A model of the upstream's own, answering as REPLY, for its wire straight."""
    name = f"after-{uuid.uuid4().hex[:8]}"
    upstream.register(name, fixed(REPLY))
    yield name
    upstream.state.unregister(name)


def _items(output: list[Any]) -> list[tuple[str, str]]:
    """Each output item's type and what it says: a message's text, a call's name and
    arguments."""
    return [
        ("message", "".join(c.text for c in item.content if c.type == "output_text"))
        if item.type == "message"
        else (item.type, f"{item.name} {item.arguments}")
        for item in output
    ]


def _blocks(content: list[Any]) -> list[tuple[str, str]]:
    return [
        (b.type, b.text) if b.type == "text" else (b.type, f"{b.name} {b.input}") for b in content
    ]


EXPECTED_ITEMS = [
    ("message", BEFORE),
    ("function_call", 'get_weather {"city":"Paris"}'),
    ("message", AFTER),
]
EXPECTED_BLOCKS = [("text", BEFORE), ("tool_use", "get_weather {'city': 'Paris'}"), ("text", AFTER)]


async def _streamed_output(client: AsyncOpenAI, profile: str) -> list[Any]:
    """The output of a Responses stream's `response.completed` event."""
    stream = await client.responses.create(
        model=profile, input="weather in Paris?", tools=[RESPONSES_TOOL], stream=True
    )
    completed = [e async for e in stream if e.type == "response.completed"]
    assert len(completed) == 1
    return list(completed[0].response.output)


# The upstream's wire, straight.


async def test_the_anthropic_wire_answers_a_text_block_after_the_tool_use(
    upstream: UpstreamServer, model: str
) -> None:
    async with anthropic.AsyncAnthropic(
        base_url=upstream.base_url, api_key="x", max_retries=0
    ) as client:
        body: Any = {"model": model, "max_tokens": 100, "messages": ASK, "tools": [MESSAGES_TOOL]}
        whole = await client.messages.create(**body)
        async with client.messages.stream(**body) as stream:
            kinds = [e.content_block.type async for e in stream if e.type == "content_block_start"]
            streamed = await stream.get_final_message()
    assert _blocks(whole.content) == EXPECTED_BLOCKS
    assert kinds == ["text", "tool_use", "text"]  # one block each, in that order
    assert _blocks(streamed.content) == EXPECTED_BLOCKS
    assert whole.stop_reason == streamed.stop_reason == "tool_use"
    # The text after the call is output as the text before it is.
    said = count_tokens(BEFORE) + count_tokens(AFTER)
    call = count_tokens("get_weather") + count_tokens('{"city":"Paris"}')
    assert whole.usage.output_tokens == streamed.usage.output_tokens == said + call


async def test_the_openai_wire_streams_content_after_the_tool_calls(
    upstream: UpstreamServer, model: str
) -> None:
    async with AsyncOpenAI(base_url=upstream.openai_base_url, api_key="x", max_retries=0) as c:
        body: Any = {"model": model, "messages": ASK, "tools": [CHAT_TOOL]}
        whole = await c.chat.completions.create(**body)
        stream = await c.chat.completions.create(**body, stream=True)
        # What each chunk carries, in order, runs of the same kind as one.
        order: list[str] = []
        after: list[str] = []
        async for chunk in stream:
            for choice in chunk.choices:
                kind = (
                    "calls" if choice.delta.tool_calls else "text" if choice.delta.content else ""
                )
                if kind and (not order or order[-1] != kind):
                    order.append(kind)
                if kind == "text" and order.count("text") == 2:
                    after.append(choice.delta.content or "")
    assert order == ["text", "calls", "text"]
    assert "".join(after) == AFTER
    # Whole, a Chat message has one content string: the text after the calls ends it.
    message = whole.choices[0].message
    assert message.content == BEFORE + AFTER
    assert [(c.function.name, c.function.arguments) for c in message.tool_calls or []] == [
        ("get_weather", '{"city":"Paris"}')
    ]
    assert whole.choices[0].finish_reason == "tool_calls"
    said = count_tokens(BEFORE) + count_tokens(AFTER)
    call = count_tokens("get_weather") + count_tokens('{"city":"Paris"}')
    assert whole.usage is not None and whole.usage.completion_tokens == said + call


# Our surfaces over it.


async def test_responses_keep_the_items_of_an_anthropic_answer_in_order(
    responses: AsyncOpenAI, answering: Catalog
) -> None:
    profile = answering.profile("anthropic")
    whole = await responses.responses.create(
        model=profile, input="weather in Paris?", tools=[RESPONSES_TOOL]
    )
    assert _items(whole.output) == EXPECTED_ITEMS
    streamed = await _streamed_output(responses, profile)
    assert _items(streamed) == _items(whole.output)


async def test_messages_keep_the_blocks_of_an_anthropic_answer_in_order(
    messages: anthropic.AsyncAnthropic, answering: Catalog
) -> None:
    body: Any = {
        "model": answering.profile("anthropic"),
        "max_tokens": 100,
        "messages": ASK,
        "tools": [MESSAGES_TOOL],
    }
    whole = await messages.messages.create(**body)
    assert _blocks(whole.content) == EXPECTED_BLOCKS
    async with messages.messages.stream(**body) as stream:
        streamed = await stream.get_final_message()
    assert _blocks(streamed.content) == EXPECTED_BLOCKS


async def test_a_responses_stream_keeps_content_streamed_after_openai_calls_in_order(
    responses: AsyncOpenAI, answering: Catalog
) -> None:
    streamed = await _streamed_output(responses, answering.profile("openai"))
    assert _items(streamed) == EXPECTED_ITEMS
