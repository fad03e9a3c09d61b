"""What Claude Code (and the Agent SDK, and the anthropic SDK's newer options) sends on every
turn, through the official anthropic SDK: thinking `adaptive`, `output_config.effort` and
`clear_thinking_*` context edits were each a 400, so Claude Code pointed at the gateway was
refused on every request; they are taken, and none reaches a deployment. A breakpoint's beta
fields (`scope: global`) reached an Anthropic deployment, which refuses them; a tool result's
text part marked for caching lost its marker; `diagnostics` was refused as unknown, and
`max_tokens: 0` (pre-warm the cache) was a bare range error. What asks for thinking the gateway
cannot return, or context edits that change what the model sees, is still refused."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
from anthropic import AsyncAnthropic

from providers.anthropic_convert import convert
from providers.types import ChatRequest, Message, Tool
from providers.upstream import ChatTurn, Reply, UpstreamServer, default_responder
from tests.helpers.surfaces import PROTOCOLS, Catalog

# A breakpoint as Claude Code marks its system prompt: `scope` is a beta's field.
GLOBAL: Any = {"type": "ephemeral", "scope": "global"}
CLEAR_THINKING: Any = {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}
BASH: Any = {
    "name": "Bash",
    "description": "Executes a given bash command",
    "input_schema": {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "The command to execute"},
            "timeout": {"type": "number", "description": "Optional timeout in milliseconds"},
        },
        "required": ["command"],
        "additionalProperties": False,
    },
}
READ: Any = {
    "name": "Read",
    "description": "Reads a file from the local filesystem",
    "input_schema": {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {"file_path": {"type": "string"}},
        "required": ["file_path"],
        "additionalProperties": False,
    },
    "cache_control": {"type": "ephemeral"},
}


def claude_code_turn(profile: str) -> dict[str, Any]:
    """A Claude Code turn's body as it sends it (beta client, the beta header alongside): its
    system blocks marked for caching, tools, `metadata.user_id`, a tool round trip whose result
    ends the history, adaptive thinking, effort and the clear-thinking edit."""
    return {
        "model": profile,
        "max_tokens": 32000,
        "system": [
            {
                "type": "text",
                "text": "You are Claude Code, Anthropic's official CLI for Claude.",
                "cache_control": GLOBAL,
            },
            {
                "type": "text",
                "text": "You are an interactive CLI tool that helps users with tasks.",
                "cache_control": {"type": "ephemeral"},
            },
        ],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "<system-reminder>As you answer…</system-reminder>"},
                    {"type": "text", "text": "which files are here?"},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Listing them."},
                    {
                        "type": "tool_use",
                        "id": "toolu_01A",
                        "name": "Bash",
                        "input": {"command": "ls"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_01A",
                        "content": "a.py\nb.py",
                        "is_error": False,
                        "cache_control": {"type": "ephemeral"},
                    }
                ],
            },
        ],
        "tools": [BASH, READ],
        "metadata": {"user_id": "user_3f2a_account_9c1e_session_77b0"},
        "thinking": {"type": "adaptive", "budget_tokens": 0},
        "output_config": {"effort": "high"},
        "context_management": CLEAR_THINKING,
        "betas": [
            "claude-code-20250219",
            "interleaved-thinking-2025-05-14",
            "context-management-2025-06-27",
        ],
    }


@pytest.fixture
def client(anthropic_sdk: AsyncAnthropic, catalog: Catalog) -> AsyncAnthropic:
    """The tenant's anthropic SDK, once the catalog is published."""
    return anthropic_sdk


@pytest.fixture
def seen(catalog: Catalog, upstream: UpstreamServer) -> Iterator[list[dict[str, Any]]]:
    """The bodies the Anthropic deployment's model received, as the simulator read them."""
    bodies: list[dict[str, Any]] = []

    def record(turn: ChatTurn) -> Reply:
        bodies.append(turn.raw)
        return default_responder(turn)

    upstream.register(catalog.model("anthropic"), record)
    yield bodies
    upstream.register(catalog.model("anthropic"), default_responder)


def _text(message: Any) -> str:
    return "".join(b.text for b in message.content if b.type == "text")


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_claude_code_settings_are_answered_without_thinking(
    client: AsyncAnthropic, catalog: Catalog, protocol: str, seen: list[dict[str, Any]]
) -> None:
    # Each was a 400 (thinking.type, output_config.effort, context_management).
    asked: Any = {
        "model": catalog.profile(protocol),
        "messages": [{"role": "user", "content": "hello"}],
        "thinking": {"type": "adaptive"},
        "output_config": {"effort": "high"},
        "extra_body": {"context_management": CLEAR_THINKING},
    }
    message = await client.messages.create(max_tokens=50, **asked)
    assert _text(message) == "Echo: hello"
    assert [b.type for b in message.content] == ["text"]  # leave to think: answered without
    counted = await client.messages.count_tokens(**asked)
    assert counted.input_tokens > 0
    # Taken, and not passed on: the deployment would think in blocks this surface cannot give.
    for sent in seen:
        assert not {"thinking", "context_management"} & set(sent), sent
        assert "effort" not in str(sent.get("output_config"))
    assert len(seen) == (1 if protocol == "anthropic" else 0)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_claude_code_turn_is_answered_whole_and_streamed(
    client: AsyncAnthropic, catalog: Catalog, protocol: str, seen: list[dict[str, Any]]
) -> None:
    body = claude_code_turn(catalog.profile(protocol))
    # Claude Code streams; whole, the SDK wants a timeout said for so large a max_tokens.
    whole = await client.beta.messages.create(**body, timeout=60)
    assert _text(whole) == "Tool result received: a.py\nb.py"
    async with client.beta.messages.stream(**body) as stream:
        streamed = await stream.get_final_message()
    assert _text(streamed) == _text(whole)
    assert streamed.stop_reason == "end_turn"
    if protocol == "openai":
        return
    assert len(seen) == 2
    for sent in seen:
        # The breakpoints as marked, without `scope`: Anthropic refuses it without the beta
        # header this gateway never sends ("Extra inputs are not permitted").
        assert [b.get("cache_control") for b in sent["system"]] == [{"type": "ephemeral"}] * 2
        assert sent["tools"][1]["cache_control"] == {"type": "ephemeral"}
        assert sent["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
        assert "scope" not in str(sent)
        assert not {"thinking", "context_management", "output_config"} & set(sent)


async def test_a_breakpoint_keeps_its_ttl_and_loses_its_scope(
    client: AsyncAnthropic, catalog: Catalog, seen: list[dict[str, Any]]
) -> None:
    marker: Any = {"type": "ephemeral", "ttl": "1h", "scope": "global"}
    message = await client.messages.create(
        model=catalog.profile("anthropic"),
        max_tokens=50,
        system=[{"type": "text", "text": "A stable system prompt.", "cache_control": marker}],
        messages=[{"role": "user", "content": "hi"}],
    )
    assert _text(message) == "Echo: hi"
    [sent] = seen
    assert sent["system"] == [
        {
            "type": "text",
            "text": "A stable system prompt.",
            "cache_control": {"type": "ephemeral", "ttl": "1h"},
        }
    ]


def test_an_anthropic_request_carries_no_beta_field_of_a_breakpoint() -> None:
    """A normalised request holding one (an invocation started before this surface dropped
    them, read back from its workflow) still reaches Anthropic without it."""
    marker = {"type": "ephemeral", "ttl": "5m", "scope": "global"}
    request = ChatRequest(
        messages=(
            Message(role="system", content="s", cache_control=marker),
            Message(role="user", content="u", cache_control=marker),
        ),
        tools=(Tool(name="t", parameters={"type": "object"}, cache_control=marker),),
    )
    params = convert(request, "m")
    breakpoints = [
        params["system"][0]["cache_control"],
        params["messages"][0]["content"][-1]["cache_control"],
        params["tools"][0]["cache_control"],
    ]
    assert breakpoints == [{"type": "ephemeral", "ttl": "5m"}] * 3


async def test_a_marked_text_part_of_a_tool_result_keeps_its_breakpoint(
    client: AsyncAnthropic, catalog: Catalog, seen: list[dict[str, Any]]
) -> None:
    # The marker on the result's last text part was dropped: nothing cached there.
    history: Any = [
        {"role": "user", "content": "read it"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [
                        {"type": "text", "text": "line 1"},
                        {"type": "text", "text": "line 2", "cache_control": GLOBAL},
                    ],
                }
            ],
        },
    ]
    message = await client.messages.create(
        model=catalog.profile("anthropic"), max_tokens=50, messages=history
    )
    assert _text(message) == "Tool result received: line 1\nline 2"
    [sent] = seen
    [result] = sent["messages"][-1]["content"]
    assert result["type"] == "tool_result"
    assert result["cache_control"] == {"type": "ephemeral"}
    with pytest.raises(anthropic.BadRequestError) as refused:
        history[-1]["content"][0]["content"][1]["cache_control"] = {"type": "persistent"}
        await client.messages.create(
            model=catalog.profile("anthropic"), max_tokens=50, messages=history
        )
    assert "body.messages.2.content.0.content.1.cache_control" in refused.value.message


async def test_diagnostics_is_a_hint(client: AsyncAnthropic, catalog: Catalog) -> None:
    # A typed argument of the SDK's create, refused as unknown; the answer's is null, as
    # Anthropic's is when it has no cache-miss reason to give.
    message = await client.messages.create(
        model=catalog.profile("openai"),
        max_tokens=50,
        messages=[{"role": "user", "content": "diagnosed"}],
        diagnostics={"previous_message_id": None},
    )
    assert _text(message) == "Echo: diagnosed"
    assert message.diagnostics is None


@pytest.mark.parametrize(
    ("asked", "field", "said"),
    [
        # Asks for thinking, in blocks this surface never answers with.
        (
            {"thinking": {"type": "enabled", "budget_tokens": 2048}},
            "body.thinking.type",
            "adaptive",
        ),
        ({"thinking": {"type": "between_tools"}}, "body.thinking.type", "adaptive"),
        ({"thinking": {"type": "adaptive", "depth": 3}}, "body.thinking.depth", "unsupported"),
        ({"output_config": {"effort": "extreme"}}, "body.output_config.effort", "xhigh"),
        # Changes what the model is shown.
        (
            {
                "context_management": {
                    "edits": [
                        {"type": "clear_thinking_20251015"},
                        {"type": "clear_tool_uses_20250919"},
                    ]
                }
            },
            "body.context_management.edits.1.type",
            "clear_thinking",
        ),
        (
            {"context_management": {"edits": [{"type": "compact_20260112"}]}},
            "body.context_management.edits.0.type",
            "clear_thinking",
        ),
        # The SDK's "populate the prompt cache without generating a response".
        ({"max_tokens": 0}, "body.max_tokens", "pre-warm"),
    ],
)
async def test_what_asks_for_more_than_an_answer_here_is_refused(
    client: AsyncAnthropic, catalog: Catalog, asked: dict[str, Any], field: str, said: str
) -> None:
    body: Any = {
        "model": catalog.profile("openai"),
        "max_tokens": 50,
        "messages": [{"role": "user", "content": "x"}],
        **asked,
    }
    if "context_management" in body:  # the beta's argument, not the plain create's
        body["extra_body"] = {"context_management": body.pop("context_management")}
    with pytest.raises(anthropic.BadRequestError) as refused:
        await client.messages.create(**body)
    assert refused.value.type == "invalid_request_error"
    assert field in refused.value.message and said in refused.value.message
