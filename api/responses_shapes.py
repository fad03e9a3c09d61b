"""OpenAI Responses wire shapes: the request (`input` as a string or a list of message /
function_call / function_call_output items and references to this gateway's own output items,
`instructions`, function tools, `tool_choice`, `text.format`, `max_output_tokens`) mapped to
the normalised ChatRequest. The Response object built from the answer and its receipt is
api/responses_answers.py.

Nothing is stored server-side for this surface (`store` is false): `previous_response_id`,
`conversation`, `store: true` and background mode would need this gateway to keep prompts and
outputs under the tenant's retention, so they are refused. An `item_reference` to an item this
gateway answered (`msg_…`, `fc_…`) stands for that item as the invocation's stored answer,
which it keeps for replays anyway, still holds it (read by api/routers/responses.py:
@ai-sdk/openai sends its earlier output as such references unless given `store: false`); any
other reference, or one whose answer is no longer kept, is refused. So is what the normalised
request cannot carry: images, files, audio, reasoning items and settings, non-function tools,
a function tool's fields other than its name, description, parameters and strict, `top_p`,
logprobs. An empty `input` (`""`, `[]`) is refused, as OpenAI refuses it.
Identifiers and hints that do not change the answer (`metadata`, `user`, `safety_identifier`,
`prompt_cache_key`, `service_tier`, `include` of reasoning content that never exists here) are
accepted, and so is `truncation: auto` (nothing is truncated here: an overflow fails as under
"disabled"); any other field is refused as unknown, as OpenAI refuses it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from api.anthropic_shapes import joined_texts
from api.openai_shapes import field_errors
from api.problems import body_refused as _refuse
from domain.text import StoredName
from providers.types import (
    ChatRequest,
    Message,
    ResponseFormat,
    Tool,
    ToolCall,
    ToolChoice,
)

# Request fields that need server-side state, or have no place in the normalised request.
_STATEFUL = ("previous_response_id", "conversation", "prompt", "background_options")
_UNMAPPED = (
    "top_p",
    "top_logprobs",
    "max_tool_calls",
    "context_management",
    "image",
    "moderation",
    "access_programs",
)
# Fields the SDK sends that change nothing here: identifiers and hints. Any other field this
# model does not declare is refused: Chat Completions' `response_format`, `max_tokens` or `stop`,
# dropped, left the answer unshaped and uncapped where OpenAI would have said 400.
_HINTS = frozenset(
    {
        "user",
        "safety_identifier",
        "prompt_cache_key",
        "prompt_cache_options",
        "prompt_cache_retention",
        "service_tier",
        "stream_options",
    }
)
# Content parts whose words the normalised message carries (an assistant's refusal, sent back
# as history, among them), and the key each keeps them under.
_TEXT_PARTS = {"input_text": "text", "output_text": "text", "text": "text", "refusal": "refusal"}


class _Loose(BaseModel):
    model_config = ConfigDict(extra="allow")


class FunctionTool(_Loose):
    type: Literal["function"]
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class TextFormat(_Loose):
    type: Literal["text", "json_object", "json_schema"]
    name: str | None = Field(default=None, max_length=64)
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None
    description: str | None = None


class TextConfig(_Loose):
    format: TextFormat | None = None
    verbosity: str | None = None


class ResponsesIn(_Loose):
    model: StoredName = Field(min_length=1, max_length=200, description="A profile id")
    input: str | list[dict[str, Any]] = Field(
        description="Text, or message / function_call / function_call_output items"
    )
    instructions: str | None = None
    tools: list[FunctionTool] | None = Field(default=None, max_length=512)
    tool_choice: Literal["auto", "none", "required"] | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    store: bool | None = Field(default=None, description="Only false: nothing is stored")
    background: bool | None = None
    reasoning: dict[str, Any] | None = None
    # "auto" is taken (the Agents SDK's ModelSettings(truncation="auto") and the AI SDK send
    # it; refused, their every call was a 400) though the gateway never truncates: a prompt
    # past the context window fails `context_length_exceeded`, as under "disabled", and an
    # agent compacts on that (a stream says it in `response.failed`).
    truncation: Literal["auto", "disabled"] | None = None
    include: list[str] | None = None
    metadata: dict[str, str] | None = None
    # Null asks for nothing (the SDK's non-stream overload types it Optional): a whole answer.
    stream: bool | None = None


def _refusals(body: ResponsesIn) -> None:
    extra = body.model_extra or {}
    for name in _STATEFUL:
        if extra.get(name) is not None:
            raise _refuse(
                (name,),
                "this gateway is stateless (store: false): send the whole conversation as input",
            )
    if not body.input:
        # As OpenAI refuses it (400, param `input`), before anything is claimed: `""` and `[]`
        # were claimed and sent, a Failed receipt where the provider refused them. After the
        # stateful fields: `[]` with previous_response_id is told why that cannot be.
        raise _refuse(("input",), "must not be empty: send text or at least one item")
    if body.store:
        raise _refuse(("store",), "responses are not stored; send store: false or omit it")
    if body.background:
        raise _refuse(("background",), "background responses need stored state")
    for name in _UNMAPPED:
        if extra.get(name) is not None:
            raise _refuse((name,), "cannot be mapped to the normalised request")
    # A field sent as null asks for nothing (clients that serialise unset options so).
    for name in sorted(k for k, v in extra.items() if v is not None and k not in _HINTS):
        raise _refuse((name,), "unknown parameter")
    _tool_refusals(body.tools or [])
    if body.reasoning and any(v is not None for v in body.reasoning.values()):
        raise _refuse(("reasoning",), "reasoning settings cannot be mapped")
    if body.text is not None and body.text.verbosity is not None:
        raise _refuse(("text", "verbosity"), "cannot be mapped")
    _unknown_keys(body.text, ("text",))
    _unknown_keys(body.text.format if body.text else None, ("text", "format"))
    if "message.output_text.logprobs" in (body.include or []):
        raise _refuse(("include",), "logprobs cannot be mapped")


def _unknown_keys(
    part: BaseModel | None, loc: tuple[str | int, ...], message: str = "unknown parameter"
) -> None:
    """Keys of a nested object this surface does not declare, sent not null: refused, as the
    top level's are (they were taken and dropped, and `text` echoed them back)."""
    extra = (part.model_extra or {}) if part is not None else {}
    for name in sorted(k for k, v in extra.items() if v is not None):
        raise _refuse((*loc, name), message)


def _tool_refusals(tools: list[FunctionTool]) -> None:
    """A function tool's fields beyond those the normalised tool carries (`defer_loading`,
    `allowed_callers`, `output_schema`, any unknown one): dropped, a deferred tool was sent
    whole, its callers went unchecked, and the response echoed them as if honoured."""
    for index, tool in enumerate(tools):
        _unknown_keys(tool, ("tools", index), "cannot be mapped to a function tool here")


def _text(content: Any, loc: tuple[str | int, ...]) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _refuse(loc, "must be a string or a list of text parts")
    parts = []
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        # A type that is no string (a list, an object) cannot be looked up in the set: a 500.
        if not isinstance(kind, str) or kind not in _TEXT_PARTS:
            raise _refuse((*loc, i, "type"), f"{kind!r} content cannot be mapped")
        key = _TEXT_PARTS[kind]
        text = part.get(key)
        if not isinstance(text, str):
            raise _refuse((*loc, i, key), f"a {kind} part needs its {key}")
        parts.append(text)
    return joined_texts(parts)


def _str(item: dict[str, Any], key: str, loc: tuple[str | int, ...]) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value:
        raise _refuse((*loc, key), "required")
    return value


# Said of a reference to an item this gateway did not answer: refused for its missing role, or
# as an item that "cannot be mapped", the caller was not told why, nor what to send instead.
_FOREIGN_REFERENCE = (
    "is a reference to a stored item this gateway cannot resolve: it is stateless and stores "
    "no responses, and resolves only its own output items (msg_…, fc_…); send the item itself "
    "(with the AI SDK, providerOptions: {openai: {store: false}} sends items, not references)"
)
# Said of a reference to one of this gateway's own items whose answer is not kept (past the
# tenant's retention, another tenant's, or never stored).
_NOT_KEPT = (
    "names an item whose answer this gateway no longer keeps: send the item itself, or store: "
    "false (with the AI SDK, providerOptions: {openai: {store: false}}) so that items are sent"
)


def item_kind(item: dict[str, Any]) -> object:
    """An item's type. Without one it is an easy message, or, holding an `id` and no `role`,
    an item_reference (whose `type` is optional in the SDK). A null type asks for nothing."""
    kind = item.get("type")
    if kind is not None:
        return kind
    return "item_reference" if "id" in item and "role" not in item else "message"


def references(body: ResponsesIn) -> list[str]:
    """The ids the input's item references name, for the caller to look up before mapping."""
    if isinstance(body.input, str):
        return []
    refs = (item.get("id") for item in body.input if item_kind(item) == "item_reference")
    return [ref for ref in refs if isinstance(ref, str)]


def _referenced(
    item: dict[str, Any], loc: tuple[str | int, ...], kept: Mapping[str, dict[str, Any] | None]
) -> dict[str, Any]:
    """The item a reference stands for: one of this gateway's own output items, as its stored
    answer holds it (`kept`: None for one of ours whose answer is not kept; no entry for an id
    that is not ours)."""
    ref = item.get("id")
    if not isinstance(ref, str) or not ref:
        raise _refuse((*loc, "id"), "required")
    if ref not in kept:
        raise _refuse(loc, _FOREIGN_REFERENCE)
    found = kept[ref]
    if found is None:
        raise _refuse((*loc, "id"), _NOT_KEPT)
    return found


def _items(items: list[dict[str, Any]], kept: Mapping[str, dict[str, Any] | None]) -> list[Message]:
    messages: list[Message] = []
    for index, item in enumerate(items):
        loc: tuple[str | int, ...] = ("input", index)
        kind = item_kind(item)
        if kind == "item_reference":
            item = _referenced(item, loc, kept)
            kind = item["type"]
        last = messages[-1] if messages else None
        # The assistant turn whose calls have no outputs yet: the calls, and the text before
        # and after them, of one answer.
        open_turn = last if last is not None and last.role == "assistant" else None
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "system", "developer", "assistant"):
                raise _refuse((*loc, "role"), "must be user, system, developer or assistant")
            text = _text(item.get("content"), (*loc, "content"))
            if role == "assistant" and open_turn is not None and open_turn.tool_calls:
                # Text after the calls (an answer of text, call, text, sent back as the Agents
                # SDK and the AI SDK send it): a turn of its own between the calls and their
                # outputs, which OpenAI refuses (tool messages must follow their calls). A
                # Chat message holds one text, before its calls: the texts are joined in order.
                content = joined_texts(t for t in (open_turn.content, text) if t)
                messages[-1] = open_turn.model_copy(update={"content": content or None})
            else:
                role = "system" if role == "developer" else role
                messages.append(Message(role=role, content=text))
        elif kind == "function_call":
            call = ToolCall(
                id=_str(item, "call_id", loc),
                name=_str(item, "name", loc),
                arguments=item.get("arguments") or "{}",
            )
            # Calls of one turn (and the text before them) are one assistant message.
            if open_turn is not None:
                messages[-1] = open_turn.model_copy(
                    update={"tool_calls": (*open_turn.tool_calls, call)}
                )
            else:
                messages.append(Message(role="assistant", tool_calls=(call,)))
        elif kind == "function_call_output":
            output = _text(item.get("output", ""), (*loc, "output"))
            messages.append(
                Message(role="tool", content=output, tool_call_id=_str(item, "call_id", loc))
            )
        else:
            raise _refuse((*loc, "type"), f"{kind!r} items cannot be mapped")
    return messages


def _choice(choice: str | dict[str, Any] | None) -> ToolChoice | None:
    if choice is None:
        return None
    with field_errors("tool_choice"):
        if isinstance(choice, str):
            return ToolChoice(mode=choice)
        if choice.get("type") != "function" or not isinstance(choice.get("name"), str):
            raise _refuse(("tool_choice",), "only auto, none, required or a named function")
        for name in sorted(
            k for k, v in choice.items() if k not in ("type", "name") and v is not None
        ):
            raise _refuse(("tool_choice", name), "unknown parameter")
        return ToolChoice(mode="tool", name=choice["name"])


def _format(text: TextConfig | None) -> ResponseFormat | None:
    fmt = text.format if text is not None else None
    if fmt is None or fmt.type == "text":
        return None
    with field_errors("text", "format"):
        return ResponseFormat(
            type=fmt.type,
            name=fmt.name,
            json_schema=fmt.schema_ if fmt.type == "json_schema" else None,
            description=fmt.description,
            # OpenAI's default is not strict: sent strict, a schema written for the default
            # (not every property required, no additionalProperties: false) was a 400.
            strict=bool(fmt.strict),
        )


def to_chat_request(
    body: ResponsesIn, kept: Mapping[str, dict[str, Any] | None] | None = None
) -> ChatRequest:
    """The normalised request. `kept`: the items this gateway's stored answers hold for the
    input's references (`references`), by id; None for one of its own whose answer is not
    kept."""
    _refusals(body)
    messages: list[Message] = []
    if body.instructions:
        messages.append(Message(role="system", content=body.instructions))
    if isinstance(body.input, str):
        messages.append(Message(role="user", content=body.input))
    else:
        with field_errors("input"):
            messages += _items(body.input, kept or {})
    with field_errors():
        return ChatRequest(
            messages=tuple(messages),
            tools=tuple(
                Tool(
                    name=t.name,
                    description=t.description,
                    parameters=t.parameters or {"type": "object", "properties": {}},
                    strict=bool(t.strict),
                )
                for t in body.tools or []
            ),
            tool_choice=_choice(body.tool_choice),
            parallel_tool_calls=body.parallel_tool_calls,
            response_format=_format(body.text),
            max_tokens=body.max_output_tokens,
            temperature=body.temperature,
        )
