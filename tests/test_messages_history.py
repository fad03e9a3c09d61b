"""Histories a Messages client carries from elsewhere, through the official anthropic SDK against
both deployments' protocols: the thinking blocks of a conversation begun with thinking on (a
Claude Code session first on Anthropic itself, a LangChain or AI SDK conversation) were a 400 on
every later turn, and are left out of the earlier turns, never sent on; consecutive turns of one
role reached an OpenAI deployment as separate messages (a call's results then did not follow
it, which OpenAI refuses), and are one turn, as Anthropic combines them; a turn with no content
was dropped, and is refused, as Anthropic refuses it."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import pytest
from anthropic import AsyncAnthropic

from tests.helpers.surfaces import PROTOCOLS, Catalog

# What a thinking model's turns hold: none of it may reach a deployment.
THOUGHT = "thought-4c1e: the user wants the weather"
SIGNATURE = "sig-9f27d0"
REDACTED = "redacted-b83a"
THINKING: Any = {"type": "thinking", "thinking": THOUGHT, "signature": SIGNATURE}
REDACTED_THINKING: Any = {"type": "redacted_thinking", "data": REDACTED}


def _call(call_id: str, city: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": "get_weather", "input": {"city": city}}


def _result(call_id: str, text: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": text}


@pytest.fixture
def client(anthropic_sdk: AsyncAnthropic, catalog: Catalog) -> AsyncAnthropic:
    """The tenant's anthropic SDK, once the catalog is published."""
    return anthropic_sdk


def _text(message: Any) -> str:
    return "".join(b.text for b in message.content if b.type == "text")


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_thinking_of_earlier_turns_is_left_out(
    client: AsyncAnthropic,
    catalog: Catalog,
    protocol: str,
    seen: dict[str, list[dict[str, Any]]],
) -> None:
    history: Any = [
        {"role": "user", "content": "weather in Paris?"},
        {
            "role": "assistant",
            "content": [
                THINKING,
                REDACTED_THINKING,
                {"type": "text", "text": "Checking."},
                _call("toolu_1", "Paris"),
            ],
        },
        {"role": "user", "content": [_result("toolu_1", "sunny")]},
        # An earlier turn of thinking only: nothing of it is left.
        {"role": "assistant", "content": [REDACTED_THINKING]},
        {"role": "user", "content": "and tomorrow?"},
    ]
    message = await client.messages.create(
        model=catalog.profile(protocol), max_tokens=50, messages=history
    )
    assert _text(message) == "Echo: and tomorrow?"
    counted = await client.messages.count_tokens(model=catalog.profile(protocol), messages=history)
    assert counted.input_tokens > 0
    [sent] = seen[protocol]
    said = json.dumps(sent)
    for trace in ("thinking", THOUGHT, SIGNATURE, REDACTED):
        assert trace not in said, sent
    # The rest of the turn is as it was: its text and its call, the result after it.
    assert "Checking." in said and "toolu_1" in said and "sunny" in said


@pytest.mark.parametrize(
    ("last", "field"),
    [
        # A prefill the model would go on from: thinking to continue, which needs it enabled.
        (
            {"role": "assistant", "content": [THINKING, {"type": "text", "text": "The"}]},
            "body.messages.1.content.0.type",
        ),
        ({"role": "assistant", "content": [REDACTED_THINKING]}, "body.messages.1.content.0.type"),
        # No model's: a user turn holds none.
        (
            {"role": "user", "content": [{"type": "text", "text": "x"}, THINKING]},
            "body.messages.1.content.1.type",
        ),
    ],
)
async def test_thinking_where_it_would_count_is_refused(
    client: AsyncAnthropic, catalog: Catalog, last: Any, field: str
) -> None:
    # The user turn is the second of two merged: its place is still named as sent.
    first: Any = {"role": "user", "content": "hi"}
    with pytest.raises(anthropic.BadRequestError) as refused:
        await client.messages.create(
            model=catalog.profile("openai"), max_tokens=50, messages=[first, last]
        )
    assert refused.value.type == "invalid_request_error"
    assert field in refused.value.message, refused.value.message


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_consecutive_assistant_turns_are_one_turn(
    client: AsyncAnthropic,
    catalog: Catalog,
    protocol: str,
    seen: dict[str, list[dict[str, Any]]],
) -> None:
    """Two calls in two assistant turns, their results in one user turn (a framework that
    stores each call as a message of its own sends them so)."""
    history: Any = [
        {"role": "user", "content": "weather in Paris and Rome?"},
        {"role": "assistant", "content": [{"type": "text", "text": "Paris."}, _call("t_a", "P")]},
        {"role": "assistant", "content": [{"type": "text", "text": "Rome."}, _call("t_b", "R")]},
        {"role": "user", "content": [_result("t_a", "sunny"), _result("t_b", "rain")]},
    ]
    message = await client.messages.create(
        model=catalog.profile(protocol), max_tokens=50, messages=history
    )
    assert _text(message).startswith("Tool result received: ")
    [sent] = seen[protocol]
    roles = [m["role"] for m in sent["messages"]]
    if protocol == "anthropic":
        assert roles == ["user", "assistant", "user"]
        # Each message's blocks in the order sent: a text after a call stays after it.
        blocks = sent["messages"][1]["content"]
        assert [(b["type"], b.get("text") or b.get("id")) for b in blocks] == [
            ("text", "Paris."),
            ("tool_use", "t_a"),
            ("text", "Rome."),
            ("tool_use", "t_b"),
        ]
        return
    # One assistant message of both calls, each followed by its result: OpenAI refuses a
    # tool_calls message whose results do not follow it.
    assert roles == ["user", "assistant", "tool", "tool"], sent["messages"]
    for i, m in enumerate(sent["messages"]):
        calls = [c["id"] for c in m.get("tool_calls") or []]
        after = sent["messages"][i + 1 : i + 1 + len(calls)]
        assert [(r["role"], r["tool_call_id"]) for r in after] == [("tool", c) for c in calls]
    assistant = sent["messages"][1]
    assert assistant["content"] == "Paris.\nRome."  # joined as one turn's texts are
    assert [c["id"] for c in assistant["tool_calls"]] == ["t_a", "t_b"]


async def test_a_turn_without_content_is_refused(client: AsyncAnthropic, catalog: Catalog) -> None:
    # It was dropped: the model answered a conversation without the turn sent.
    history: Any = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": []},
    ]
    profile = catalog.profile("openai")
    with pytest.raises(anthropic.BadRequestError) as refused:
        await client.messages.create(model=profile, max_tokens=50, messages=history)
    with pytest.raises(anthropic.BadRequestError) as uncounted:
        await client.messages.count_tokens(model=profile, messages=history)
    for error in (refused.value, uncounted.value):
        assert "body.messages.2.content" in error.message
        assert "non-empty content" in error.message
