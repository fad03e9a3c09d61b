"""Anthropic Messages wire shapes: the request mapped to the normalised ChatRequest (its history:
api/anthropic_history.py; the answer built from normalised events and the receipt is
api/anthropic_answers.py).

What the normalised request cannot carry is refused naming the field (a 400), never dropped:
images, documents, thinking blocks where they count (a user turn's, the final assistant turn's;
an earlier assistant turn's are left out, as Anthropic ignores them), thinking asked for
(`enabled`), server tools, `top_p`, `top_k`, MCP servers, containers, context edits that change
what the model sees. `cache_control` is carried to the turn (or tool) it marks (a top-level one
to the last message's last block, where Anthropic applies it), and a tool result's `is_error`
to the tool message (providers/openai_request.py says how an OpenAI deployment reads it);
`metadata` and `service_tier` describe the call, not the answer, and are accepted. So is what
Claude Code sends on every turn that changes nothing an answer here can hold: thinking
`adaptive` (leave to think, which this gateway answers without), `output_config.effort` (a
hint) and `clear_thinking_*` edits (no thinking block ever reaches a deployment to clear).
Text blocks of no text (empty, or whitespace only: in `system`, in a message, in a tool result)
say nothing and are left out, as Anthropic refuses them; a message left with no content is
refused (api/anthropic_history.py).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from api.anthropic_history import (
    CacheControl,
    MessageParam,
    breakpoint_of,
    history,
    joined_texts,
)
from api.anthropic_thinking import ThinkingParam, check_context_management, check_thinking
from api.openai_shapes import field_errors
from api.problems import body_refused as _refuse
from domain.text import StoredName
from providers.anthropic_convert import blank_text
from providers.types import ChatRequest, Message, ResponseFormat, Tool, ToolChoice

# joined_texts is still imported from here by api/responses_shapes.py (the same joining rule).
__all__ = ["CountTokensIn", "MessagesIn", "joined_texts", "to_chat_request"]

# Fields of the Messages API the normalised request has no place for.
_REFUSED = ("top_p", "top_k", "mcp_servers", "container")
# Fields the SDK may send that change nothing here: identifiers, `diagnostics` (asks for a
# cache-miss reason in the answer, whose `diagnostics` is then null, as Anthropic's is when it
# has none), and `output_format`, the structured-outputs beta's name for `output_config.format`,
# mapped as it; `context_management` is read by _context_management. Any other field the models
# below do not declare is refused: `inference_geo` (where the data may be processed) and `speed`
# were dropped, the request served as if not there.
_HINTS = frozenset(
    {"user_profile_id", "workspace_id", "output_format", "diagnostics", "context_management"}
)
# `output_config.effort`'s values. A hint: the normalised request has no place for it and an
# Anthropic model without effort refuses the field, so the deployment answers at its default
# (`high` on Anthropic's models that take effort).
_EFFORTS = ("low", "medium", "high", "xhigh", "max")
# A tool's fields besides those ToolParam declares: only a streaming hint changes nothing here
# (`defer_loading`, `input_examples`, `allowed_callers` would change what the model is shown).
_TOOL_HINTS = frozenset({"eager_input_streaming"})


class _Loose(BaseModel):
    model_config = ConfigDict(extra="allow")


class SystemBlock(_Loose):
    type: Literal["text"]
    text: str
    cache_control: CacheControl | None = None


def _custom_only(schema: dict[str, Any]) -> None:
    """The schema says what is taken, a custom tool with its input_schema; validation reads any
    type and no input_schema, so that a server tool is refused saying so (_tool_refusals), not
    as a custom tool missing its input_schema."""
    props = schema["properties"]
    props["type"]["anyOf"] = [{"const": "custom", "type": "string"}, {"type": "null"}]
    props["input_schema"] = {
        "additionalProperties": True,
        "title": "Input Schema",
        "type": "object",
    }
    schema["required"] = [*schema.get("required", []), "input_schema"]


class ToolParam(_Loose):
    model_config = ConfigDict(extra="allow", json_schema_extra=_custom_only)

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    type: str | None = Field(
        default=None, description="Custom (client) tools only; server tools are refused"
    )
    strict: bool | None = None
    cache_control: CacheControl | None = None


class ToolChoiceParam(_Loose):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


# As many messages as the Messages API takes in one request.
MAX_MESSAGES = 100_000


class MessagesIn(_Loose):
    model: StoredName = Field(min_length=1, max_length=200, description="A profile id")
    # Validated from 0, so that 0 is refused saying why (_refusals), not as a bare range error;
    # the schema says what is taken (at least 1), which is what clients generated from it send.
    max_tokens: int = Field(
        ge=0,
        description="Required, as in the Messages API; at least 1",
        json_schema_extra={"minimum": 1},
    )
    messages: list[MessageParam] = Field(min_length=1, max_length=MAX_MESSAGES)
    system: str | list[SystemBlock] | None = None
    stop_sequences: list[str] | None = Field(default=None, max_length=16)
    temperature: float | None = Field(default=None, ge=0, le=1)
    tools: list[ToolParam] | None = Field(default=None, max_length=512)
    tool_choice: ToolChoiceParam | None = None
    thinking: ThinkingParam | None = None
    output_config: dict[str, Any] | None = None
    cache_control: CacheControl | None = Field(
        default=None, description="A breakpoint on the last message's last block"
    )
    metadata: dict[str, Any] | None = None
    service_tier: str | None = None
    # Null asks for nothing (a whole answer), as any field sent as null: it was refused.
    stream: bool | None = False


class CountTokensIn(_Loose):
    model: StoredName = Field(min_length=1, max_length=200, description="A profile id")
    messages: list[MessageParam] = Field(min_length=1, max_length=MAX_MESSAGES)
    system: str | list[SystemBlock] | None = None
    tools: list[ToolParam] | None = Field(default=None, max_length=512)
    tool_choice: ToolChoiceParam | None = None
    thinking: ThinkingParam | None = None
    output_config: dict[str, Any] | None = None
    cache_control: CacheControl | None = Field(
        default=None, description="A breakpoint on the last message's last block"
    )


_MESSAGES_FIELDS = frozenset(MessagesIn.model_fields)


def _cache(block: SystemBlock | ToolParam) -> dict[str, Any] | None:
    return breakpoint_of(block.cache_control)


def _system(system: str | list[SystemBlock] | None) -> list[Message]:
    """A system message for each block, but those of no text (empty, or whitespace only), left
    out as a message's are (api/anthropic_history.py _kept), a breakpoint on one moved to the
    block before it unless that has its own (with none before it, it goes too)."""
    if system is None:
        return []
    if isinstance(system, str):
        return [] if blank_text(system) else [Message(role="system", content=system)]
    out: list[Message] = []
    for b in system:
        if not blank_text(b.text):
            out.append(Message(role="system", content=b.text, cache_control=_cache(b)))
        elif b.cache_control is not None and out and out[-1].cache_control is None:
            out[-1] = out[-1].model_copy(update={"cache_control": _cache(b)})
    return out


def _tools(tools: list[ToolParam] | None) -> tuple[Tool, ...]:
    return tuple(
        Tool(
            name=t.name,
            description=t.description,
            parameters=t.input_schema or {},
            strict=bool(t.strict),
            cache_control=_cache(t),
        )
        for t in tools or []
    )


def _choice(choice: ToolChoiceParam | None) -> tuple[ToolChoice | None, bool | None]:
    if choice is None:
        return None, None
    mode = {"auto": "auto", "any": "required", "none": "none", "tool": "tool"}[choice.type]
    with field_errors("tool_choice"):
        normalised = ToolChoice(mode=mode, name=choice.name if mode == "tool" else None)
    parallel = False if choice.disable_parallel_tool_use else None
    return normalised, parallel


def _output_config(
    body: MessagesIn | CountTokensIn,
) -> tuple[dict[str, Any] | None, tuple[str, ...]]:
    """`output_config`, or the beta's `output_format` (`beta.messages.parse` sends it) as its
    `format`, with where the format was sent (a refusal names it); both at once is a refusal
    of the second."""
    beta = (body.model_extra or {}).get("output_format")
    if beta is None:
        return body.output_config, ("output_config", "format")
    if body.output_config and body.output_config.get("format") is not None:
        raise _refuse(("output_format",), "send output_config.format or output_format, not both")
    return {**(body.output_config or {}), "format": beta}, ("output_format",)


def _format(
    config: dict[str, Any] | None, where: tuple[str, ...] = ("output_config", "format")
) -> ResponseFormat | None:
    if not config:
        return None
    # A key sent as null asks for nothing (`effort: null`, as clients serialise unset options).
    unknown = sorted(
        k for k, v in config.items() if k not in ("format", "effort") and v is not None
    )
    if unknown:
        raise _refuse(("output_config", unknown[0]), "cannot be mapped")
    effort = config.get("effort")
    if effort is not None and effort not in _EFFORTS:
        raise _refuse(("output_config", "effort"), f"must be one of {', '.join(_EFFORTS)}")
    fmt = config.get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        raise _refuse((*where, "type"), "only json_schema can be mapped")
    schema = fmt.get("schema")
    if not isinstance(schema, dict):
        raise _refuse((*where, "schema"), "a JSON schema object is required")
    return ResponseFormat(type="json_schema", name="output", json_schema=schema, strict=True)


def _tool_refusals(index: int, tool: ToolParam) -> None:
    """A server tool (`web_search_20250305`, …) or an Anthropic-defined one (`bash_…`) is run by
    Anthropic or shaped by it, which no deployment here does: refused naming its type, before
    its own fields (it was "input_schema: Field required", which said nothing of why)."""
    if tool.type not in (None, "custom"):
        raise _refuse(
            ("tools", index, "type"),
            "server tools and Anthropic-defined tools cannot be run by this gateway: only custom"
            " tools (name, input_schema) can be mapped",
        )
    if tool.input_schema is None:
        raise _refuse(("tools", index, "input_schema"), "Field required")
    for name in sorted(k for k, v in (tool.model_extra or {}).items() if v is not None):
        if name not in _TOOL_HINTS:
            raise _refuse(("tools", index, name), "unsupported tool parameter")


def _refusals(body: MessagesIn | CountTokensIn) -> None:
    extra = body.model_extra or {}
    for name in _REFUSED:
        if extra.get(name) is not None:
            raise _refuse((name,), "cannot be mapped to the normalised request")
    # A field sent as null asks for nothing (clients that serialise unset options so). Token
    # counting takes a Messages body as it would be sent (`max_tokens`, `stream`, …): they
    # change no count.
    taken = _HINTS | (_MESSAGES_FIELDS if isinstance(body, CountTokensIn) else frozenset())
    for name in sorted(k for k, v in extra.items() if v is not None and k not in taken):
        raise _refuse((name,), "unknown or unsupported parameter")
    for index, tool in enumerate(body.tools or []):
        _tool_refusals(index, tool)
    check_thinking(body.thinking)
    check_context_management(extra.get("context_management"))
    if isinstance(body, MessagesIn) and body.max_tokens == 0:
        # The SDK's way to write the prompt cache with no answer: a provider call billed for
        # nothing this gateway can give back, and an Anthropic-only one.
        raise _refuse(
            ("max_tokens",),
            "0 asks to pre-warm the prompt cache without an answer, which this gateway does not"
            " do: send at least 1",
        )


def to_chat_request(body: MessagesIn | CountTokensIn) -> ChatRequest:
    _refusals(body)
    messages = _system(body.system) + history(body.messages, body.cache_control)
    choice, parallel = _choice(body.tool_choice)
    max_tokens = body.max_tokens if isinstance(body, MessagesIn) else None
    temperature = body.temperature if isinstance(body, MessagesIn) else None
    stop = tuple(body.stop_sequences or ()) if isinstance(body, MessagesIn) else ()
    with field_errors():
        return ChatRequest(
            messages=tuple(messages),
            tools=_tools(body.tools),
            tool_choice=choice,
            parallel_tool_calls=parallel,
            response_format=_format(*_output_config(body)),
            max_tokens=max_tokens,
            temperature=temperature,
            stop=stop,
        )
