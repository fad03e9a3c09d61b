"""Anthropic's messages.create arguments from a normalised chat request: system messages to
`system`, tool results to user turns, merged turns, the prompt-cache breakpoints, JSON output
and strict tools' schemas as Anthropic takes them (providers/anthropic_json_mode.py), and a
temperature within Anthropic's range."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from providers.anthropic_json_mode import (
    answer_tool,
    ask_for_answer,
    output_format,
    sendable_schema,
)
from providers.types import ChatRequest, Message

DEFAULT_MAX_TOKENS = 4096
_EPHEMERAL = {"type": "ephemeral"}
_CHOICE = {"auto": "auto", "none": "none", "required": "any", "tool": "tool"}
# Anthropic's highest temperature. OpenAI's surfaces take up to 2; above this Anthropic answers
# 400 (after the key was claimed, where an OpenAI deployment answered the same request). Clamped,
# not scaled: a value Anthropic takes goes as given (0.7 stays 0.7, what a caller tuned on
# Anthropic expects, and the Messages surface takes 0-1 only), and OpenAI's 1-2 has no exact
# counterpart on Anthropic's scale to map to anyway.
_MAX_TEMPERATURE = 1.0


# Anthropic takes tool-call ids of these characters only; an OpenAI-compatible server's may hold
# others (`functions.bash:0`), and a session's next turn sent to an Anthropic deployment (a
# fallback) was refused. Each other character becomes `_`, in the call and in its result alike,
# and a digest of the id as given follows, so two ids that differ only there stay two.
_NOT_ID = re.compile(r"[^a-zA-Z0-9_-]")


def _id(call_id: str | None) -> str | None:
    if not call_id or not _NOT_ID.search(call_id):
        return call_id
    digest = hashlib.sha256(call_id.encode()).hexdigest()[:8]
    return f"{_NOT_ID.sub('_', call_id)}_{digest}"


def _breakpoint(marker: dict[str, Any]) -> dict[str, Any]:
    """A breakpoint as Anthropic takes it without a beta header (none is sent): its type and
    ttl. Any other field (Claude Code's `scope`) is refused there ("Extra inputs are not
    permitted"), and the call with it."""
    ttl = marker.get("ttl")
    return {"type": marker.get("type") or "ephemeral", **({"ttl": ttl} if ttl else {})}


def blank_text(text: str | None) -> bool:
    """Whether a text is none Anthropic takes in a text block: empty ("text content blocks must
    be non-empty") or whitespace only ("text content blocks must contain non-whitespace text").
    Such a block says nothing: it is never sent, and the Messages surface leaves it out of the
    normalised request (api/anthropic_history.py)."""
    return not text or text.isspace()


def _tool_input(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {}


def _blocks(message: Message) -> tuple[str, list[dict[str, Any]]]:
    blocks: list[dict[str, Any]]
    if message.role == "tool":
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": _id(message.tool_call_id)}
        if message.is_error:
            block["is_error"] = True
        if not blank_text(message.content):  # a result of no text: no content, which Anthropic
            block["content"] = message.content  # takes (its own example of an empty result)
        blocks = [block]
    else:
        blocks = []
        if not blank_text(message.content):
            blocks.append({"type": "text", "text": message.content})
        blocks += [
            {"type": "tool_use", "id": _id(c.id), "name": c.name, "input": _tool_input(c.arguments)}
            for c in message.tool_calls
        ]
    if message.cache_control is not None and blocks:
        blocks[-1]["cache_control"] = _breakpoint(message.cache_control)
    return ("user" if message.role == "tool" else message.role), blocks


def _explicit_cache(request: ChatRequest) -> bool:
    return any(m.cache_control is not None for m in request.messages) or any(
        t.cache_control is not None for t in request.tools
    )


def _system(request: ChatRequest, prompt_caching: bool) -> str | list[dict[str, Any]] | None:
    # A system turn of no text is none Anthropic takes (blank_text): left out.
    system = [m for m in request.messages if m.role == "system"]
    if _explicit_cache(request):
        # The caller placed its own breakpoints: one block per system turn, each as marked; a
        # left-out turn's moves to the block before it, unless that has its own (the prefix it
        # marked is the same), as the Messages surface moves it (api/anthropic_shapes.py).
        blocks: list[dict[str, Any]] = []
        for m in system:
            marker = {"cache_control": _breakpoint(m.cache_control)} if m.cache_control else {}
            if not blank_text(m.content):
                blocks.append({"type": "text", "text": m.content, **marker})
            elif blocks and "cache_control" not in blocks[-1]:
                blocks[-1].update(marker)
        return blocks or None
    text = "\n\n".join(m.content for m in system if m.content and not blank_text(m.content))
    if not text:
        return None
    if prompt_caching:
        return [{"type": "text", "text": text, "cache_control": dict(_EPHEMERAL)}]
    return text


def convert(
    request: ChatRequest, model: str, *, prompt_caching: bool = True, provider: str = "anthropic"
) -> dict[str, Any]:
    """The messages.create arguments. System messages become `system`; tool results become
    user turns; consecutive turns of one role merge, as the API requires alternation.

    Breakpoints the caller set (`cache_control` on turns and tools, from the Messages surface)
    are passed as given, and then no others are added (the API allows four). Otherwise, with
    prompt_caching, cache breakpoints go on the system prompt and on the end of the history
    before the newest turn, so an agent's growing conversation is read from the cache instead
    of billed in full each turn (Anthropic ignores them below its minimum length).

    A json_schema the structured outputs cannot take, or a strict tool's such schema, raises
    ProviderError (invalid_request, naming `provider`)."""
    turns: list[dict[str, Any]] = []
    for message in request.messages:
        if message.role == "system":
            continue
        role, blocks = _blocks(message)
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    params: dict[str, Any] = {
        "model": model,
        "messages": turns,
        "max_tokens": request.max_tokens or DEFAULT_MAX_TOKENS,
    }
    automatic = prompt_caching and not _explicit_cache(request)
    if automatic and len(turns) >= 2 and turns[-2]["content"]:
        turns[-2]["content"][-1]["cache_control"] = dict(_EPHEMERAL)
    system = _system(request, automatic)
    if system:
        params["system"] = system
    if request.tools:
        params["tools"] = [
            {
                "name": t.name,
                **({"description": t.description} if t.description else {}),
                # A strict tool's schema in the subset strict tool use takes, as a json_schema
                # format's (providers/anthropic_json_mode.py); any other takes any schema.
                "input_schema": sendable_schema(
                    t.parameters, provider, f"the JSON schema of strict tool '{t.name}'"
                )
                if t.strict
                else t.parameters,
                **({"strict": True} if t.strict else {}),
                **({"cache_control": _breakpoint(t.cache_control)} if t.cache_control else {}),
            }
            for t in request.tools
        ]
        choice = request.tool_choice
        mode = choice.mode if choice is not None else "auto"
        tool_choice: dict[str, Any] = {"type": _CHOICE[mode]}
        if mode == "tool" and choice is not None:
            tool_choice["name"] = choice.name
        if request.parallel_tool_calls is False and mode != "none":
            tool_choice["disable_parallel_tool_use"] = True
        params["tool_choice"] = tool_choice
    # JSON output as Anthropic takes it (providers/anthropic_json_mode.py): JSON mode and a
    # json_schema that is not strict as a tool the model answers with, any other json_schema
    # (a strict one, the Messages surface's) in its structured outputs' subset.
    fmt = request.response_format
    answer = answer_tool(request)
    if answer is not None:
        ask_for_answer(request, params, answer)
    elif fmt is not None and fmt.type == "json_schema":
        params["output_config"] = {"format": output_format(fmt, provider)}
    if request.stop:
        params["stop_sequences"] = list(request.stop)
    if request.temperature is not None:
        # Not a typed argument of this SDK's messages.create; older models still accept it.
        temperature = min(request.temperature, _MAX_TEMPERATURE)
        params["extra_body"] = {"temperature": temperature}
    return params
