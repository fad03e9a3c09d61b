"""Messages request fields the anthropic SDK sends that were refused or misread: a top-level
`cache_control` (carried to the last message's last block, where Anthropic applies it), a tool
result of several text blocks (kept apart, not run together), `output_config` keys sent as
null (asking for nothing), histories past 10,000 messages (Anthropic takes 100,000), `stream`
sent as null (a whole answer), and a server tool (refused naming its type)."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest
from anthropic import AsyncAnthropic

from providers.upstream import ChatTurn, Reply, UpstreamServer, default_responder
from tests.helpers.surfaces import PROTOCOLS, Catalog


@pytest.fixture
def client(anthropic_sdk: AsyncAnthropic, catalog: Catalog) -> AsyncAnthropic:
    """The tenant's anthropic SDK, once the catalog is published."""
    return anthropic_sdk


def _text(message: Any) -> str:
    return "".join(b.text for b in message.content if b.type == "text")


HISTORY: Any = [
    {"role": "user", "content": "first"},
    {"role": "assistant", "content": "ok"},
    {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
]


async def test_a_top_level_cache_control_marks_the_last_block_for_anthropic(
    client: AsyncAnthropic, catalog: Catalog, upstream: UpstreamServer
) -> None:
    """It was refused as an unknown field, though a typed parameter of the SDK's create and
    count_tokens. An Anthropic deployment gets it on the last block of the last message, and
    then no breakpoint of the adapter's own; an OpenAI deployment caches prefixes by itself."""
    seen: list[dict[str, Any]] = []

    def record(turn: ChatTurn) -> Reply:
        seen.append(turn.raw)
        return default_responder(turn)

    marker: Any = {"type": "ephemeral", "ttl": "1h"}
    upstream.register(catalog.model("anthropic"), record)
    try:
        for protocol in PROTOCOLS:
            message = await client.messages.create(
                model=catalog.profile(protocol),
                max_tokens=50,
                system="A stable system prompt.",
                messages=HISTORY,
                cache_control=marker,
            )
            # Answered (OpenAI's simulator echoes the last user message, Anthropic's the turn).
            assert _text(message).startswith("Echo: ") and _text(message).endswith("b")
            counted = await client.messages.count_tokens(
                model=catalog.profile(protocol), messages=HISTORY, cache_control=marker
            )
            assert counted.input_tokens > 0
    finally:
        upstream.register(catalog.model("anthropic"), default_responder)
    [sent] = seen
    *before, last = sent["messages"][-1]["content"]
    assert last == {"type": "text", "text": "b", "cache_control": marker}
    assert "cache_control" not in str(before) + str(sent["messages"][:-1])
    assert "cache_control" not in str(sent["system"])  # no breakpoint of the adapter's


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_tool_result_of_several_text_blocks_keeps_them_apart(
    client: AsyncAnthropic, catalog: Catalog, protocol: str
) -> None:
    # Joined end to end, "Found 2 files:" and "a.py" reached the model as "Found 2 files:a.py".
    history: Any = [
        {"role": "user", "content": "which files?"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [
                        {"type": "text", "text": "Found 2 files:"},
                        {"type": "text", "text": "a.py"},
                    ],
                }
            ],
        },
    ]
    message = await client.messages.create(
        model=catalog.profile(protocol), max_tokens=100, messages=history
    )
    assert _text(message) == "Tool result received: Found 2 files:\na.py"


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_output_config_keys_sent_as_null_are_taken(
    client: AsyncAnthropic, catalog: Catalog, protocol: str
) -> None:
    """`effort: null` asks for nothing, as any field sent as null; it was refused as a key that
    cannot be mapped (an effort is a hint, taken: tests/test_messages_claude_code.py)."""
    message = await client.messages.create(
        model=catalog.profile(protocol),
        max_tokens=50,
        messages=[{"role": "user", "content": "no effort said"}],
        output_config={"effort": None},
    )
    assert _text(message) == "Echo: no effort said"
    counted = await client.messages.count_tokens(
        model=catalog.profile(protocol),
        messages=[{"role": "user", "content": "no effort said"}],
        output_config={"effort": None},
    )
    assert counted.input_tokens > 0


async def test_a_history_past_ten_thousand_messages_is_taken(
    client: AsyncAnthropic, catalog: Catalog
) -> None:
    # The Messages API takes 100,000 messages a request; 10,001 were refused here.
    history: Any = [{"role": "user", "content": "x"} for _ in range(10_000)]
    history.append({"role": "user", "content": "the last"})
    message = await client.messages.create(
        model=catalog.profile("openai"), max_tokens=50, messages=history
    )
    assert _text(message) == "Echo: the last"
    counted = await client.messages.count_tokens(model=catalog.profile("openai"), messages=history)
    assert counted.input_tokens > 10_000


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_stream_sent_as_null_is_a_whole_answer(
    client: AsyncAnthropic, catalog: Catalog, protocol: str
) -> None:
    # A field sent as null asks for nothing; `stream: null` was refused (not a boolean).
    message = await client.messages.create(
        model=catalog.profile(protocol),
        max_tokens=50,
        messages=[{"role": "user", "content": "not streamed"}],
        extra_body={"stream": None},
    )
    assert _text(message) == "Echo: not streamed"


async def test_a_server_tool_is_refused_naming_its_type(
    client: AsyncAnthropic, catalog: Catalog
) -> None:
    """It was refused as a custom tool without its input_schema ("Field required"), which
    said nothing of why."""
    body: Any = {
        "model": catalog.profile("openai"),
        "messages": [{"role": "user", "content": "search the web"}],
        "tools": [
            {"name": "lookup", "input_schema": {"type": "object"}},
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
        ],
    }
    with pytest.raises(anthropic.BadRequestError) as refused:
        await client.messages.create(max_tokens=50, **body)
    with pytest.raises(anthropic.BadRequestError) as uncounted:
        await client.messages.count_tokens(**body)
    for error in (refused.value, uncounted.value):
        assert "body.tools.1.type: server tools" in error.message, error.message
        assert "Field required" not in error.message
