"""The OpenAI Chat Completions request body, built from our own request types: what the adapter
sends through the SDK's client as it is (providers/openai_adapter.py). Claude Code's billing line
(a system block of its own) is left out of it: see _billing_line."""

from __future__ import annotations

from typing import Any

from providers.types import ChatRequest, Message

TOOL_ERROR_PREFIX = "Error: "
# What Claude Code's first system block starts with, e.g. `x-anthropic-billing-header:
# cc_version=2.0.14; cc_entrypoint=cli; cch=ab12c;`. Its value changes every turn.
BILLING_HEADER = "x-anthropic-billing-header:"


def _billing_line(message: Message) -> bool:
    """Whether the message is Claude Code's billing block. Sent first, its changing value made an
    OpenAI deployment's prefix cache miss on every turn, and it says nothing to the model: left
    out of this body only (an Anthropic deployment is sent it, as Anthropic reads it). Messages
    maps each system block to a system message of its own (api/anthropic_shapes.py), so here
    the block is the whole message; one that goes on past its first line (a `system` sent as one
    string that begins with the line) holds the caller's prompt too, and is kept whole."""
    if message.role != "system" or not message.content:
        return False
    return message.content.startswith(BILLING_HEADER) and "\n" not in message.content.strip()


def _message(message: Message) -> dict[str, Any]:
    if message.role == "tool":
        content = message.content or ""
        if message.is_error:
            # Chat Completions has no flag for a failed tool: the model is told in the result's
            # own words, as the one place it reads (docs: README, "Messages").
            content = f"{TOOL_ERROR_PREFIX}{content}"
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": content}
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in message.tool_calls
        ]
    elif message.content is None:
        out["content"] = ""
    if message.name is not None:
        out["name"] = message.name
    return out


def _assistant_turns(messages: tuple[Message, ...] | list[Message]) -> list[Message]:
    """Consecutive assistant messages as one. Chat Completions wants each message with
    `tool_calls` followed at once by the calls' results: a history of [assistant(call A),
    assistant(call B), tool A, tool B] (Anthropic's Messages combines such turns, and Claude
    Code sends them) was OpenAI's 400. Their texts are joined by a newline, their calls kept in
    order: Chat Completions has no order between an assistant's text and its calls. Turns of
    two named speakers stay two (an agent group's), as the caller sent them: one would be said
    by one of them only; unless the first holds calls, whose results must follow the turn that
    made them (merged under the first's name, as before names were carried)."""
    out: list[Message] = []
    for message in messages:
        last = out[-1] if out else None
        if (
            last is None
            or message.role != "assistant"
            or last.role != "assistant"
            or (message.name != last.name and not last.tool_calls)
        ):
            out.append(message)
            continue
        texts = [t for t in (last.content, message.content) if t]
        out[-1] = last.model_copy(
            update={
                "content": "\n".join(texts) or None,
                "tool_calls": last.tool_calls + message.tool_calls,
                "cache_control": message.cache_control or last.cache_control,
            }
        )
    return out


def chat_body(request: ChatRequest, model: str, max_tokens_param: str) -> dict[str, Any]:
    """The Chat Completions request body of a call, as plain JSON values."""
    params: dict[str, Any] = {
        "model": model,
        "messages": [
            _message(m) for m in _assistant_turns(request.messages) if not _billing_line(m)
        ],
    }
    if request.tools:
        params["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    **({"description": t.description} if t.description else {}),
                    "parameters": t.parameters,
                    **({"strict": True} if t.strict else {}),
                },
            }
            for t in request.tools
        ]
        if request.tool_choice is not None:
            choice = request.tool_choice
            params["tool_choice"] = (
                {"type": "function", "function": {"name": choice.name}}
                if choice.mode == "tool"
                else choice.mode
            )
        if request.parallel_tool_calls is not None:
            params["parallel_tool_calls"] = request.parallel_tool_calls
    fmt = request.response_format
    if fmt is not None and fmt.type == "json_object":
        params["response_format"] = {"type": "json_object"}
    elif fmt is not None and fmt.type == "json_schema":
        params["response_format"] = {
            "type": "json_schema",
            "json_schema": {
                "name": fmt.name or "response",
                "schema": fmt.json_schema,
                "strict": fmt.strict,
                **({"description": fmt.description} if fmt.description else {}),
            },
        }
    if request.max_tokens is not None:
        params[max_tokens_param] = request.max_tokens
    if request.temperature is not None:
        params["temperature"] = request.temperature
    if request.stop:
        params["stop"] = list(request.stop)
    return params
