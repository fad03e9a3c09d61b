"""Empty text the Messages API refuses, where the surface took it: a message whose `content` is
the empty string (refused naming `messages.N.content`, as `[]` is, but in the final assistant
message), and an empty text part of a tool result (naming its `text`). Refused first, through
the official anthropic SDK, for `create` and `count_tokens` alike, and nothing is claimed."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest
from anthropic import AsyncAnthropic
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from tests.helpers.receipts import receipt_count
from tests.helpers.surfaces import PROTOCOLS, Catalog

EMPTY_CONTENT = "all messages must have non-empty content"
EMPTY_TEXT = "text content blocks must be non-empty"
CALL: Any = {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "true"}}


@pytest.fixture
def client(anthropic_sdk: AsyncAnthropic, catalog: Catalog) -> AsyncAnthropic:
    """The tenant's anthropic SDK, once the catalog is published."""
    return anthropic_sdk


def _ask(text: str) -> Any:
    return {"role": "user", "content": text}


def _result(*texts: str) -> Any:
    parts = [{"type": "text", "text": t} for t in texts]
    return {"type": "tool_result", "tool_use_id": "toolu_1", "content": parts}


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(
    ("messages", "field", "words"),
    [
        # A user message of "" (sent on: an Anthropic deployment refused it once claimed).
        ([_ask("")], "body.messages.0.content", EMPTY_CONTENT),
        # An earlier assistant message of "".
        (
            [_ask("hi"), {"role": "assistant", "content": ""}, _ask("again")],
            "body.messages.1.content",
            EMPTY_CONTENT,
        ),
        # A tool result's empty text part, after one with text (it was joined and taken).
        (
            [
                _ask("run it"),
                {"role": "assistant", "content": [CALL]},
                {"role": "user", "content": [_result("done", "")]},
            ],
            "body.messages.2.content.0.content.1.text",
            EMPTY_TEXT,
        ),
    ],
)
async def test_empty_text_is_refused_before_anything_is_claimed(
    client: AsyncAnthropic,
    catalog: Catalog,
    sessions: async_sessionmaker[AsyncSession],
    protocol: str,
    messages: Any,
    field: str,
    words: str,
) -> None:
    body: Any = {"model": catalog.profile(protocol), "messages": messages}
    with pytest.raises(anthropic.BadRequestError) as refused:
        await client.messages.create(max_tokens=50, **body)
    with pytest.raises(anthropic.BadRequestError) as uncounted:
        await client.messages.count_tokens(**body)
    for error in (refused.value, uncounted.value):
        assert error.type == "invalid_request_error"
        assert field in error.message, error.message
        assert words in error.message, error.message
    assert await receipt_count(sessions, catalog.tenant) == 0


async def test_a_final_assistant_message_of_empty_text_is_taken(
    client: AsyncAnthropic, catalog: Catalog, sessions: async_sessionmaker[AsyncSession]
) -> None:
    # As `[]` is there: the optional final assistant message Anthropic lets be empty. A tool
    # result whose text parts are only blank is text too.
    message = await client.messages.create(
        model=catalog.profile("anthropic"),
        max_tokens=50,
        messages=[
            _ask("run it"),
            {"role": "assistant", "content": [CALL]},
            {"role": "user", "content": [_result(" ")]},
            {"role": "assistant", "content": ""},
        ],
    )
    assert message.stop_reason == "end_turn"
    assert await receipt_count(sessions, catalog.tenant) == 1
