"""The OpenAI Chat Completions request body, built from our own request types: what the adapter
sends through the SDK's client as it is (providers/openai_adapter.py)."""

from __future__ import annotations

from typing import Any

from providers.types import ChatRequest, Message

TOOL_ERROR_PREFIX = "Error: "


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
    return out


def chat_body(request: ChatRequest, model: str, max_tokens_param: str) -> dict[str, Any]:
    """The Chat Completions request body of a call, as plain JSON values."""
    params: dict[str, Any] = {
        "model": model,
        "messages": [_message(m) for m in request.messages],
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
