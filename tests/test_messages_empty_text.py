"""An empty text block on the Messages surface, through the official anthropic SDK: sent on, an
Anthropic deployment refused it after the call was claimed (a Failed receipt for a request never
to be answered); it is refused first, as Anthropic refuses it, naming the block's `text`, in a
message's content or in `system`, and nothing is claimed. Whitespace-only text is still taken."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest
from anthropic import AsyncAnthropic
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from tests.helpers.receipts import receipt_count
from tests.helpers.surfaces import Catalog

EMPTY: Any = {"type": "text", "text": ""}
SYSTEM: Any = {"type": "text", "text": "You are terse."}


@pytest.fixture
def client(anthropic_sdk: AsyncAnthropic, catalog: Catalog) -> AsyncAnthropic:
    """The tenant's anthropic SDK, once the catalog is published."""
    return anthropic_sdk


def _ask(text: str) -> Any:
    return {"role": "user", "content": text}


@pytest.mark.parametrize(
    ("asked", "field"),
    [
        # In a user turn, after a block that has text.
        (
            {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}, EMPTY]}]},
            "body.messages.0.content.1.text",
        ),
        # In an earlier assistant turn.
        (
            {"messages": [_ask("hi"), {"role": "assistant", "content": [EMPTY]}, _ask("again")]},
            "body.messages.1.content.0.text",
        ),
        # In the final assistant turn (a prefill): Anthropic refuses it there too.
        (
            {"messages": [_ask("hi"), {"role": "assistant", "content": [EMPTY]}]},
            "body.messages.1.content.0.text",
        ),
        # In `system`, as Anthropic names it.
        ({"system": [SYSTEM, EMPTY], "messages": [_ask("hi")]}, "body.system.1.text"),
    ],
)
async def test_an_empty_text_block_is_refused_before_anything_is_claimed(
    client: AsyncAnthropic,
    catalog: Catalog,
    sessions: async_sessionmaker[AsyncSession],
    asked: dict[str, Any],
    field: str,
) -> None:
    # The Anthropic deployment: the one that refused it once the call had been claimed.
    body: Any = {"model": catalog.profile("anthropic"), **asked}
    with pytest.raises(anthropic.BadRequestError) as refused:
        await client.messages.create(max_tokens=50, **body)
    with pytest.raises(anthropic.BadRequestError) as uncounted:
        await client.messages.count_tokens(**body)
    for error in (refused.value, uncounted.value):
        assert error.type == "invalid_request_error"
        assert field in error.message
        assert "text content blocks must be non-empty" in error.message
    assert await receipt_count(sessions, catalog.tenant) == 0


async def test_whitespace_only_text_is_taken(
    client: AsyncAnthropic, catalog: Catalog, sessions: async_sessionmaker[AsyncSession]
) -> None:
    # Only the empty string is refused: a blank line is text, and this surface does not judge it.
    message = await client.messages.create(
        model=catalog.profile("anthropic"),
        max_tokens=50,
        system=[SYSTEM, {"type": "text", "text": " "}],
        messages=[
            {
                "role": "user",
                "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": "\n"}],
            }
        ],
    )
    assert message.stop_reason == "end_turn"
    assert await receipt_count(sessions, catalog.tenant) == 1
