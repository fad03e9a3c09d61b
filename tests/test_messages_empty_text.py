"""Text blocks of no text on the Messages surface, through the official anthropic SDK: a text
block whose `text` is empty or whitespace only, in a message or in `system`, says nothing and is
refused by Anthropic ("text content blocks must be non-empty", "… must contain non-whitespace
text"), so it is left out of what a deployment is sent and the request is answered. Refused, it
wedged a session: Claude Code resuming one sends `[{"type":"text","text":""}, tool_use]` for an
assistant turn that held calls alone, on every later turn. A message left with no content is
still refused naming it, and nothing is claimed. A breakpoint on a block left out moves to the
block before it in its message, unless that has its own; with none before it, it goes too.

Whatever surface a call came from, an Anthropic deployment is never sent such a block (the
local upstream's Anthropic endpoint refuses it, as Anthropic does): a Chat Completions call's
blank system, assistant and tool texts included."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest
from anthropic import AsyncAnthropic
from openai import AsyncOpenAI
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from providers.anthropic_convert import convert
from providers.types import ChatRequest, Message
from tests.helpers.receipts import receipt_count
from tests.helpers.surfaces import PROTOCOLS, Catalog

EMPTY: Any = {"type": "text", "text": ""}
BLANK: Any = {"type": "text", "text": " \n\t"}
SYSTEM: Any = {"type": "text", "text": "You are terse."}
NO_CONTENT = "all messages must have non-empty content except for the optional final assistant"
MARK: Any = {"type": "ephemeral"}
MARK_5M: Any = {"type": "ephemeral", "ttl": "5m"}
BASH: Any = {
    "name": "bash",
    "description": "Runs a command",
    "input_schema": {
        "type": "object",
        "properties": {"command": {"type": "string"}},
        "required": ["command"],
    },
}
CALL: Any = {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "ls"}}


@pytest.fixture
def client(anthropic_sdk: AsyncAnthropic, catalog: Catalog) -> AsyncAnthropic:
    """The tenant's anthropic SDK, once the catalog is published."""
    return anthropic_sdk


def texts(node: Any) -> list[str]:
    """Every text of a body a deployment was sent: text blocks' `text` and the string
    `content`s and `system` (Chat Completions' messages, Anthropic's string forms)."""
    if isinstance(node, list):
        return [t for item in node for t in texts(item)]
    if not isinstance(node, dict):
        return []
    found = [node["text"]] if node.get("type") == "text" else []
    for key in ("system", "messages", "content"):
        value = node.get(key)
        found += [value] if isinstance(value, str) else texts(value)
    return found


def _ask(text: str) -> Any:
    return {"role": "user", "content": text}


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(
    ("asked", "kept"),
    [
        # In a user turn, after a block that has text: empty, and whitespace only.
        (
            {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}, EMPTY]}]},
            ["hi"],
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}, BLANK]}]},
            ["hi"],
        ),
        # In an earlier assistant turn, around its text.
        (
            {
                "messages": [
                    _ask("hi"),
                    {
                        "role": "assistant",
                        "content": [EMPTY, {"type": "text", "text": "yo"}, BLANK],
                    },
                    _ask("again"),
                ]
            },
            ["hi", "yo", "again"],
        ),
        # In `system`.
        ({"system": [SYSTEM, EMPTY, BLANK], "messages": [_ask("hi")]}, ["You are terse.", "hi"]),
    ],
    ids=["user-empty", "user-whitespace", "assistant", "system"],
)
async def test_a_text_block_of_no_text_is_left_out_and_the_request_answered(
    client: AsyncAnthropic,
    catalog: Catalog,
    sessions: async_sessionmaker[AsyncSession],
    seen: dict[str, list[dict[str, Any]]],
    protocol: str,
    asked: dict[str, Any],
    kept: list[str],
) -> None:
    body: Any = {"model": catalog.profile(protocol), **asked}
    message = await client.messages.create(max_tokens=50, **body)
    assert message.stop_reason == "end_turn"
    counted = await client.messages.count_tokens(**body)
    assert await receipt_count(sessions, catalog.tenant) == 1
    [sent] = seen[protocol]
    assert sorted(texts(sent)) == sorted(kept), sent  # every text but those of none
    if protocol == "anthropic":
        # Counted by the deployment, which took the body (its estimate stands in for a refusal).
        usage = message.usage
        read, written = usage.cache_read_input_tokens or 0, usage.cache_creation_input_tokens or 0
        assert counted.input_tokens == usage.input_tokens + read + written


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_claude_code_resuming_a_turn_of_calls_alone_is_answered(
    client: AsyncAnthropic,
    catalog: Catalog,
    sessions: async_sessionmaker[AsyncSession],
    seen: dict[str, list[dict[str, Any]]],
    protocol: str,
    stream: bool,
) -> None:
    # As Claude Code's resumed session holds it: the turn of calls alone with an empty text
    # block first, its results after it. Refused, every later turn of the session was.
    result: Any = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.py"}
    body: Any = {
        "model": catalog.profile(protocol),
        "max_tokens": 50,
        "tools": [BASH],
        "messages": [
            _ask("which files are here?"),
            {"role": "assistant", "content": [EMPTY, CALL]},
            {"role": "user", "content": [result]},
        ],
    }
    if stream:
        async with client.messages.stream(**body) as streamed:
            message = await streamed.get_final_message()
    else:
        message = await client.messages.create(**body)
    assert message.stop_reason == "end_turn"
    assert "".join(b.text for b in message.content if b.type == "text") == (
        "Tool result received: a.py"
    )
    assert await receipt_count(sessions, catalog.tenant) == 1
    [sent] = seen[protocol]
    assert all(t.strip() for t in texts(sent)), sent
    [turn] = [m for m in sent["messages"] if m["role"] == "assistant"]
    if protocol == "anthropic":
        assert [b["type"] for b in turn["content"]] == ["tool_use"]
    else:
        assert turn["content"] is None and [c["id"] for c in turn["tool_calls"]] == ["toolu_1"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(
    ("messages", "field"),
    [
        ([{"role": "user", "content": [EMPTY]}], "body.messages.0.content"),
        ([{"role": "user", "content": [BLANK, EMPTY]}], "body.messages.0.content"),
        (
            [_ask("hi"), {"role": "assistant", "content": [EMPTY]}, _ask("again")],
            "body.messages.1.content",
        ),
        # Content as a string: `""` or whitespace, a user's or an earlier assistant's.
        ([{"role": "user", "content": ""}], "body.messages.0.content"),
        ([{"role": "user", "content": " \n "}], "body.messages.0.content"),
        (
            [_ask("hi"), {"role": "assistant", "content": ""}, _ask("again")],
            "body.messages.1.content",
        ),
        (
            [_ask("hi"), {"role": "assistant", "content": "\t"}, _ask("again")],
            "body.messages.1.content",
        ),
    ],
    ids=[
        "user-empty",
        "user-whitespace",
        "earlier-assistant",
        "user-empty-string",
        "user-whitespace-string",
        "assistant-empty-string",
        "assistant-whitespace-string",
    ],
)
async def test_a_message_left_with_no_content_is_refused_before_anything_is_claimed(
    client: AsyncAnthropic,
    catalog: Catalog,
    sessions: async_sessionmaker[AsyncSession],
    seen: dict[str, list[dict[str, Any]]],
    protocol: str,
    messages: Any,
    field: str,
) -> None:
    body: Any = {"model": catalog.profile(protocol), "messages": messages}
    with pytest.raises(anthropic.BadRequestError) as refused:
        await client.messages.create(max_tokens=50, **body)
    with pytest.raises(anthropic.BadRequestError) as uncounted:
        await client.messages.count_tokens(**body)
    for error in (refused.value, uncounted.value):
        assert error.type == "invalid_request_error"
        assert field in error.message, error.message
        assert NO_CONTENT in error.message, error.message
    assert await receipt_count(sessions, catalog.tenant) == 0
    assert seen[protocol] == []


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_final_assistant_message_of_no_text_is_an_empty_one(
    client: AsyncAnthropic,
    catalog: Catalog,
    sessions: async_sessionmaker[AsyncSession],
    seen: dict[str, list[dict[str, Any]]],
    protocol: str,
) -> None:
    # The optional final assistant message Anthropic lets be empty: sent as `[]` is.
    for content in ([], [EMPTY], [BLANK, EMPTY]):
        message = await client.messages.create(
            model=catalog.profile(protocol),
            max_tokens=50,
            messages=[_ask("hi"), {"role": "assistant", "content": content}],
        )
        assert message.stop_reason == "end_turn"
    assert await receipt_count(sessions, catalog.tenant) == 3
    empty, *others = seen[protocol]
    assert others == [empty, empty]


async def test_a_breakpoint_on_a_block_left_out_moves_to_the_block_before_it(
    client: AsyncAnthropic, catalog: Catalog, seen: dict[str, list[dict[str, Any]]]
) -> None:
    # The prefix it marked is the same: the block left out added nothing to it.
    system: Any = [SYSTEM, {**BLANK, "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    messages: Any = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "hi"}, {**EMPTY, "cache_control": MARK}],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "yo"}]},
        # The block before it has its own: kept as it is.
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "again", "cache_control": MARK},
                {**BLANK, "cache_control": MARK_5M},
            ],
        },
    ]
    await client.messages.create(
        model=catalog.profile("anthropic"), max_tokens=50, system=system, messages=messages
    )
    [sent] = seen["anthropic"]
    assert sent["system"] == [
        {**SYSTEM, "cache_control": {"type": "ephemeral", "ttl": "1h"}},
    ]
    assert [m["content"] for m in sent["messages"]] == [
        [{"type": "text", "text": "hi", "cache_control": MARK}],
        [{"type": "text", "text": "yo"}],
        [{"type": "text", "text": "again", "cache_control": MARK}],
    ]


async def test_a_breakpoint_with_no_block_before_it_goes_with_its_block(
    client: AsyncAnthropic, catalog: Catalog, seen: dict[str, list[dict[str, Any]]]
) -> None:
    first: Any = {**EMPTY, "cache_control": MARK}
    await client.messages.create(
        model=catalog.profile("anthropic"),
        max_tokens=50,
        messages=[{"role": "user", "content": [first, {"type": "text", "text": "hi"}]}],
    )
    [sent] = seen["anthropic"]
    # No breakpoint of the caller's left, and none of this gateway's for a single turn.
    assert sent["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]


async def test_a_top_level_breakpoint_goes_to_the_last_block_kept(
    client: AsyncAnthropic, catalog: Catalog, seen: dict[str, list[dict[str, Any]]]
) -> None:
    # Anthropic applies it to the request's last cacheable block: the text, not the blank.
    await client.messages.create(
        model=catalog.profile("anthropic"),
        max_tokens=50,
        messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}, BLANK]}],
        extra_body={"cache_control": MARK},
    )
    [sent] = seen["anthropic"]
    assert sent["messages"][-1]["content"] == [
        {"type": "text", "text": "hi", "cache_control": MARK}
    ]


async def test_a_chat_completions_call_sends_an_anthropic_deployment_no_blank_text(
    openai_sdk: AsyncOpenAI,
    catalog: Catalog,
    sessions: async_sessionmaker[AsyncSession],
    seen: dict[str, list[dict[str, Any]]],
) -> None:
    # Chat Completions passes its strings as given: a blank system message, an assistant's
    # whitespace beside its calls, a command's output of a newline alone. The local upstream
    # refuses each as Anthropic does, so the answer itself says they were not sent.
    function: Any = {"name": "bash", "arguments": '{"command": "true"}'}
    completion = await openai_sdk.chat.completions.create(
        model=catalog.profile("anthropic"),
        max_tokens=50,
        tools=[
            {"type": "function", "function": {"name": "bash", "parameters": BASH["input_schema"]}}
        ],
        messages=[
            {"role": "system", "content": " "},
            {"role": "user", "content": "run it"},
            {
                "role": "assistant",
                "content": "\n",
                "tool_calls": [{"id": "call_1", "type": "function", "function": function}],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "\n"},
        ],
    )
    assert completion.choices[0].finish_reason == "stop"
    assert await receipt_count(sessions, catalog.tenant) == 1
    [sent] = seen["anthropic"]
    assert "system" not in sent
    assert texts(sent) == ["run it"]
    call, result = sent["messages"][1]["content"][0], sent["messages"][2]["content"][0]
    assert call["type"] == "tool_use" and "content" not in result  # no content: an empty result


def test_the_explicit_breakpoints_system_keeps_no_blank_block() -> None:
    """A normalised request's system turns of no text, where the caller placed breakpoints
    (each system turn a block of its own): left out, a breakpoint on one moved to the block
    before it unless that has its own, and going with it when there is none."""
    hour = {"type": "ephemeral", "ttl": "1h"}
    request = ChatRequest(
        messages=(
            Message(role="system", content=" ", cache_control=MARK),
            Message(role="system", content="A"),
            Message(role="system", content="", cache_control=hour),
            Message(role="system", content="B", cache_control=MARK),
            Message(role="system", content="\n", cache_control=hour),
            Message(role="user", content="hi"),
            Message(role="assistant", content=" "),
            Message(role="user", content="again"),
        ),
    )
    params = convert(request, "m")
    assert params["system"] == [
        {"type": "text", "text": "A", "cache_control": hour},
        {"type": "text", "text": "B", "cache_control": MARK},
    ]
    assert texts(params["messages"]) == ["hi", "again"]
