"""Text of no text where the Messages API takes a string or a tool result's parts, through the
official anthropic SDK. A message whose `content` is a string of no text (empty, or whitespace
only) is a message with no content: refused naming `messages.N.content`, as `[]` is, but in the
final assistant message (the refusal's cases are with the blocks' in test_messages_empty_text.py;
the final assistant message's here). A tool
result's text part of no text is left out, as a message's text block is (its breakpoint still
the result's); a result left with no text is one with no content, which Anthropic takes. The
local upstream's Anthropic endpoint refuses what Anthropic refuses, in Anthropic's words."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import pytest
from anthropic import AsyncAnthropic
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from providers.upstream import UpstreamServer
from tests.helpers.receipts import receipt_count
from tests.helpers.surfaces import PROTOCOLS, Catalog

EMPTY_CONTENT = "all messages must have non-empty content except for the optional final assistant"
CALL: Any = {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "true"}}
MARK: Any = {"type": "ephemeral"}


@pytest.fixture
def client(anthropic_sdk: AsyncAnthropic, catalog: Catalog) -> AsyncAnthropic:
    """The tenant's anthropic SDK, once the catalog is published."""
    return anthropic_sdk


def _ask(text: str) -> Any:
    return {"role": "user", "content": text}


def _result(*parts: str | dict[str, Any]) -> Any:
    content = [p if isinstance(p, dict) else {"type": "text", "text": p} for p in parts]
    return {"type": "tool_result", "tool_use_id": "toolu_1", "content": content}


def _ran(*blocks: Any) -> list[Any]:
    """A tool round trip ending the history: the call, then `blocks` in the user turn."""
    return [
        _ask("run it"),
        {"role": "assistant", "content": [CALL]},
        {"role": "user", "content": list(blocks)},
    ]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(
    ("result", "text", "marked"),
    [
        # An empty part after one with text (joined, it was "done\n"), a blank one before it.
        (_result("done", ""), "done", False),
        (_result(" ", "done", "\n"), "done", False),
        # Its breakpoint on a part left out is still the result's: one block, marked at its end.
        (_result("done", {"type": "text", "text": "", "cache_control": MARK}), "done", True),
        # No text at all: a result of no content.
        (_result("", " "), "", False),
        ({"type": "tool_result", "tool_use_id": "toolu_1", "content": "\n"}, "", False),
    ],
    ids=["empty-after", "blank-around", "marked", "all-blank", "string-blank"],
)
async def test_a_tool_results_text_part_of_no_text_is_left_out(
    client: AsyncAnthropic,
    catalog: Catalog,
    sessions: async_sessionmaker[AsyncSession],
    seen: dict[str, list[dict[str, Any]]],
    protocol: str,
    result: Any,
    text: str,
    marked: bool,
) -> None:
    body: Any = {"model": catalog.profile(protocol), "messages": _ran(result)}
    message = await client.messages.create(max_tokens=50, **body)
    assert message.stop_reason == "end_turn"
    assert (await client.messages.count_tokens(**body)).input_tokens > 0
    assert await receipt_count(sessions, catalog.tenant) == 1
    [sent] = seen[protocol]
    if protocol == "openai":
        [tool] = [m for m in sent["messages"] if m["role"] == "tool"]
        assert tool["content"] == text
        return
    [block] = sent["messages"][-1]["content"]
    expected: Any = {"type": "tool_result", "tool_use_id": "toolu_1"}
    if text:
        expected["content"] = text
    if marked:
        expected["cache_control"] = MARK
    assert block == expected


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_final_assistant_message_of_a_string_of_no_text_is_taken(
    client: AsyncAnthropic,
    catalog: Catalog,
    sessions: async_sessionmaker[AsyncSession],
    seen: dict[str, list[dict[str, Any]]],
    protocol: str,
) -> None:
    # As `[]` is there: the optional final assistant message Anthropic lets be empty.
    contents: list[Any] = [[], "", "  "]
    for content in contents:
        message = await client.messages.create(
            model=catalog.profile(protocol),
            max_tokens=50,
            messages=[*_ran(_result("done")), {"role": "assistant", "content": content}],
        )
        assert message.stop_reason == "end_turn"
    assert await receipt_count(sessions, catalog.tenant) == 3
    empty, *others = seen[protocol]
    assert others == [empty, empty]


async def test_the_schema_says_a_string_content_needs_text(http: httpx.AsyncClient) -> None:
    # A schema that allowed it had generated clients send it, and a 400 answer them.
    schemas = (await http.get("/openapi.json")).json()["components"]["schemas"]
    [string] = [
        s
        for s in schemas["MessageParam"]["properties"]["content"]["anyOf"]
        if s.get("type") == "string"
    ]
    assert string == {"type": "string", "minLength": 1, "pattern": "\\S"}


@pytest.mark.parametrize(
    ("asked", "words"),
    [
        ({"messages": [_ask("")]}, f"messages.0: {EMPTY_CONTENT}"),
        (
            {"messages": [_ask("hi"), {"role": "assistant", "content": []}, _ask("again")]},
            f"messages.1: {EMPTY_CONTENT}",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "text", "text": ""}]}]},
            "messages: text content blocks must be non-empty",
        ),
        (
            {"messages": [_ask(" ")]},
            "messages: text content blocks must contain non-whitespace text",
        ),
        (
            {"messages": _ran(_result("done", "\n"))},
            "messages: text content blocks must contain non-whitespace text",
        ),
        (
            {"system": [{"type": "text", "text": ""}], "messages": [_ask("hi")]},
            "system: text content blocks must be non-empty",
        ),
    ],
    ids=["content-empty", "content-none", "text-empty", "text-blank", "result-blank", "system"],
)
async def test_the_local_upstream_refuses_text_of_no_text_as_anthropic_does(
    upstream: UpstreamServer, asked: dict[str, Any], words: str
) -> None:
    # What would tell a gateway that sends such text: Anthropic's 400, whole or counted.
    async with anthropic.AsyncAnthropic(
        base_url=upstream.base_url, api_key="x", max_retries=0
    ) as direct:
        with pytest.raises(anthropic.BadRequestError) as refused:
            await direct.messages.create(model="m", max_tokens=50, **asked)
        with pytest.raises(anthropic.BadRequestError) as uncounted:
            await direct.messages.count_tokens(model="m", **asked)
        # The final assistant message may be empty, and a tool result may have no content.
        taken = await direct.messages.create(
            model="m",
            max_tokens=50,
            messages=[
                *_ran({"type": "tool_result", "tool_use_id": "toolu_1"}),
                {"role": "assistant", "content": ""},
            ],
        )
    for error in (refused.value, uncounted.value):
        assert error.type == "invalid_request_error"
        assert words in error.message, error.message
    assert taken.stop_reason == "end_turn"
