"""Claude Code's billing line, through the official anthropic SDK: the first block of its array
`system` is `x-anthropic-billing-header: …; cch=…;`, whose value changes every turn. It reached an
OpenAI deployment first in its system messages, so that deployment's prefix cache missed on every
turn; it is left out of what an OpenAI deployment is sent, the rest of the system text intact,
and an Anthropic deployment is still sent it as it came."""

from __future__ import annotations

from typing import Any

import pytest
from anthropic import AsyncAnthropic

from tests.helpers.surfaces import Catalog

BILLING = "x-anthropic-billing-header: cc_version=2.0.14; cc_entrypoint=cli; cch=ab12c;"
IDENTITY = "You are Claude Code, Anthropic's official CLI for Claude."
GUIDANCE = "You are an interactive CLI tool that helps users with tasks."
# As Claude Code sends it: the billing block unmarked, the prompt's blocks marked for caching.
SYSTEM: Any = [
    {"type": "text", "text": BILLING},
    {"type": "text", "text": IDENTITY, "cache_control": {"type": "ephemeral"}},
    {"type": "text", "text": GUIDANCE, "cache_control": {"type": "ephemeral"}},
]


@pytest.fixture
def client(anthropic_sdk: AsyncAnthropic, catalog: Catalog) -> AsyncAnthropic:
    """The tenant's anthropic SDK, once the catalog is published."""
    return anthropic_sdk


async def _ask(client: AsyncAnthropic, profile: str, system: Any) -> None:
    message = await client.messages.create(
        model=profile,
        max_tokens=50,
        system=system,
        messages=[{"role": "user", "content": "hi"}],
    )
    assert message.stop_reason == "end_turn"


async def test_an_openai_deployment_is_not_sent_the_billing_line(
    client: AsyncAnthropic, catalog: Catalog, seen: dict[str, list[dict[str, Any]]]
) -> None:
    await _ask(client, catalog.profile("openai"), SYSTEM)
    [sent] = seen["openai"]
    system = [m["content"] for m in sent["messages"] if m["role"] == "system"]
    assert system == [IDENTITY, GUIDANCE]  # the prompt first, as it is on every turn
    assert "x-anthropic-billing-header" not in str(sent)


async def test_a_system_string_that_begins_with_the_line_is_sent_whole(
    client: AsyncAnthropic, catalog: Catalog, seen: dict[str, list[dict[str, Any]]]
) -> None:
    # Not a block of its own: the caller's prompt follows it in the same text, and must reach
    # the model.
    whole = f"{BILLING}\n{IDENTITY}"
    await _ask(client, catalog.profile("openai"), whole)
    [sent] = seen["openai"]
    assert [m["content"] for m in sent["messages"] if m["role"] == "system"] == [whole]


async def test_an_anthropic_deployment_is_sent_the_billing_line(
    client: AsyncAnthropic, catalog: Catalog, seen: dict[str, list[dict[str, Any]]]
) -> None:
    await _ask(client, catalog.profile("anthropic"), SYSTEM)
    [sent] = seen["anthropic"]
    assert sent["system"] == SYSTEM  # every block as it came, the billing line first
