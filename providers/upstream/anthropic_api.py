"""Anthropic's messages wire protocol, as the simulator speaks it."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from providers.upstream.answer import Answer, AnswerUsage, new_id, prompt_prefixes
from providers.upstream.anthropic_schemas import check_schemas
from providers.upstream.anthropic_texts import check_texts
from providers.upstream.chat import BadRequest, Codec, StreamPlan, chat_endpoint, read_body, sse
from providers.upstream.faults import FaultKind
from providers.upstream.problems import anthropic_error, fault_response, malformed
from providers.upstream.tokens import fixed_chunks, text_chunks
from providers.upstream.turn import ChatTurn, ToolCallReply, ToolSpec, TurnMessage

_STOP = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "content_filter": "refusal",
    "context_window": "model_context_window_exceeded",
}
_ERROR_TYPES = {401: "authentication_error", 500: "api_error"}


def _stop_reason(answer: Answer) -> str:
    return "stop_sequence" if answer.stop_sequence else _STOP[answer.finish]


def _blocks_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(b.get("text", ""))
            for b in content
            if isinstance(b, dict) and b.get("type") == "text"
        )
    return ""


# As the Messages API checks them: a tool call's id (and a result's) of these characters only,
# and each call's id its own in the conversation.
_TOOL_ID = re.compile(r"^[a-zA-Z0-9_-]+$")


def _check_ids(raw: list[Any]) -> None:
    seen: set[str] = set()
    for i, item in enumerate(raw):
        content = item.get("content") if isinstance(item, dict) else None
        for j, b in enumerate(content if isinstance(content, list) else []):
            kind = b.get("type") if isinstance(b, dict) else None
            key = {"tool_use": "id", "tool_result": "tool_use_id"}.get(str(kind))
            if key is None:
                continue
            value = b.get(key)
            if not isinstance(value, str) or not _TOOL_ID.match(value):
                raise BadRequest(
                    f"messages.{i}.content.{j}.{kind}.{key}: String should match pattern "
                    "'^[a-zA-Z0-9_-]+$'"
                )
            if kind == "tool_use":
                if value in seen:
                    raise BadRequest(f"messages.{i}: `tool_use` ids must be unique")
                seen.add(value)


def _messages(raw: object) -> list[TurnMessage]:
    if not isinstance(raw, list) or not raw:
        raise BadRequest("messages: at least one message is required")
    _check_ids(raw)
    out: list[TurnMessage] = []
    for item in raw:
        role = item.get("role") if isinstance(item, dict) else None
        if role not in ("user", "assistant"):
            raise BadRequest("messages[].role: must be user or assistant")
        content = item.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content or ""}]
        if role == "assistant":
            calls = [
                ToolCallReply(
                    id=b.get("id"), name=b.get("name", ""), arguments=b.get("input") or {}
                )
                for b in blocks
                if b.get("type") == "tool_use"
            ]
            out.append(TurnMessage(role="assistant", text=_blocks_text(blocks), tool_calls=calls))
            continue
        for block in blocks:
            if block.get("type") == "tool_result":
                out.append(
                    TurnMessage(
                        role="tool",
                        text=_blocks_text(block.get("content")),
                        tool_call_id=block.get("tool_use_id"),
                        is_error=block.get("is_error") is True,
                    )
                )
        text = _blocks_text(blocks)
        if text or not any(b.get("type") == "tool_result" for b in blocks):
            out.append(TurnMessage(role="user", text=text))
    return out


def parse(body: dict[str, Any]) -> ChatTurn:
    if not isinstance(body.get("max_tokens"), int):
        raise BadRequest("max_tokens: Field required")
    tools = [
        ToolSpec(
            name=t["name"], description=t.get("description"), parameters=t.get("input_schema") or {}
        )
        for t in body.get("tools") or []
        if isinstance(t, dict) and "name" in t
    ]
    raw_choice = body.get("tool_choice") or {"type": "auto"}
    kind = raw_choice.get("type", "auto")
    choice = {"auto": "auto", "any": "required", "tool": "tool", "none": "none"}.get(kind)
    if choice is None:
        raise BadRequest("tool_choice.type: not valid")
    name = raw_choice.get("name") if choice == "tool" else None
    if name is not None and not any(t.name == name for t in tools):
        raise BadRequest("tool_choice.name: not in tools")
    temperature = body.get("temperature")
    if isinstance(temperature, int | float) and not 0 <= temperature <= 1:
        # Anthropic's range, refused as it refuses it (OpenAI's reaches 2).
        raise BadRequest("temperature: range: 0..1")
    fmt = (body.get("output_config") or {}).get("format") or {}
    schema = fmt.get("schema") if fmt.get("type") == "json_schema" else None
    check_schemas(body)
    check_texts(body)
    return ChatTurn(
        api="anthropic",
        model=str(body["model"]),
        system=_blocks_text(body.get("system")),
        messages=_messages(body.get("messages")),
        tools=tools,
        tool_choice=choice,
        tool_name=name,
        parallel_tool_calls=not raw_choice.get("disable_parallel_tool_use", False),
        response_format="json_schema" if schema is not None else "text",
        json_schema=schema,
        max_tokens=body["max_tokens"],
        stop=list(body.get("stop_sequences") or []),
        stream=bool(body.get("stream")),
        raw=body,
    )


def _usage(usage: AnswerUsage) -> dict[str, Any]:
    # Anthropic's input_tokens excludes the tokens read from or written to the cache.
    return {
        "input_tokens": usage.fresh_input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_creation_input_tokens": usage.cache_write_input_tokens,
        "cache_read_input_tokens": usage.cached_input_tokens,
    }


def _input(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments)
    except ValueError:
        return {"_unparsed": arguments}
    return value if isinstance(value, dict) else {"value": value}


def _message(answer: Answer, turn: ChatTurn, content: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": f"msg_{answer.response_id}",
        "type": "message",
        "role": "assistant",
        "model": turn.model,
        "content": content,
        "stop_reason": None,
        "stop_sequence": None,
    }


def render(answer: Answer, turn: ChatTurn, with_usage: bool) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": answer.text}] if answer.text else []
    content += [
        {"type": "tool_use", "id": c.id, "name": c.name, "input": _input(c.arguments)}
        for c in answer.tool_calls
    ]
    if answer.text_after_calls:  # Claude's [text, tool_use, text]: a block of its own
        content.append({"type": "text", "text": answer.text_after_calls})
    body = _message(answer, turn, content)
    body["stop_reason"] = _stop_reason(answer)
    body["stop_sequence"] = answer.stop_sequence
    if with_usage:
        body["usage"] = _usage(answer.usage)
    return body


def stream(answer: Answer, turn: ChatTurn, with_usage: bool, interleave: bool) -> StreamPlan:
    """(`interleave` is not Anthropic's: its blocks come one after another.)"""
    start = _message(answer, turn, [])
    if with_usage:
        start["usage"] = {**_usage(answer.usage), "output_tokens": 1}
    frames = [sse({"type": "message_start", "message": start}, "message_start")]
    blocks: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []

    def text_block(text: str) -> None:
        deltas = [{"type": "text_delta", "text": t} for t in text_chunks(text, answer.text_piece)]
        blocks.append(({"type": "text", "text": ""}, deltas))

    if answer.text:
        text_block(answer.text)
    for call in answer.tool_calls:
        head = {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}
        deltas = [
            {"type": "input_json_delta", "partial_json": p} for p in fixed_chunks(call.arguments)
        ]
        blocks.append((head, deltas))
    if answer.text_after_calls:  # a new text block, after the tool_use blocks
        text_block(answer.text_after_calls)
    for index, (head, deltas) in enumerate(blocks):
        frames.append(
            sse(
                {"type": "content_block_start", "index": index, "content_block": head},
                "content_block_start",
            )
        )
        if index == 0:
            frames.append(sse({"type": "ping"}, "ping"))
        frames += [
            sse({"type": "content_block_delta", "index": index, "delta": d}, "content_block_delta")
            for d in deltas
        ]
        frames.append(sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
    delta: dict[str, Any] = {
        "type": "message_delta",
        "delta": {"stop_reason": _stop_reason(answer), "stop_sequence": answer.stop_sequence},
    }
    if with_usage:
        delta["usage"] = {"output_tokens": answer.usage.output_tokens}
    frames.append(sse(delta, "message_delta"))
    return StreamPlan(
        frames=frames, terminator=sse({"type": "message_stop"}, "message_stop"), content_start=1
    )


def error(status: int, message: str, request_id: str, headers: dict[str, str]) -> Response:
    type_ = _ERROR_TYPES.get(status, "invalid_request_error")
    return anthropic_error(status, message, type_=type_, request_id=request_id, headers=headers)


def api_key(request: Request) -> str | None:
    key = request.headers.get("x-api-key")
    if key:
        return key.strip()
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


CODEC = Codec(
    api="anthropic",
    endpoint="messages",
    request_id_header="request-id",
    tool_id_prefix="toolu_",
    parse=parse,
    render=render,
    stream=stream,
    error=error,
    api_key=api_key,
    # Anthropic caches only where the request marks a cache_control breakpoint.
    caches=lambda turn: "cache_control" in json.dumps(turn.raw),
    reports_cache_writes=True,
)

messages = chat_endpoint(CODEC)


async def count_tokens(request: Request) -> Response:
    """`POST /v1/messages/count_tokens`: the whole prompt as the simulator's tokeniser counts
    it, the same figure its messages endpoint reports as input (fresh + cached + written)."""
    state = request.app.state.upstream
    request_id = new_id("req_")
    headers = {"request-id": request_id, "x-upstream-simulator": "model-router"}
    try:
        body = await read_body(request)
        state.stats.record(str(body.get("model") or ""), "count_tokens")
        if not state.key_accepted(api_key(request)):
            return error(401, "invalid api key", request_id, headers)
        turn = parse({**body, "max_tokens": 1})
    except BadRequest as exc:
        return error(400, str(exc), request_id, headers)
    except (KeyError, TypeError, ValueError, AttributeError):
        return error(400, "the request does not match the API's schema", request_id, headers)
    gate, shapes = state.faults.take(turn.model, "count_tokens")
    if gate is not None:
        return fault_response(
            gate, "anthropic", headers=headers, request_id=request_id, shutdown=state.shutdown
        )
    flaw = next((f.flaw for f in shapes if f.kind is FaultKind.MALFORMED_ANSWER), None)
    counted: dict[str, Any] = {"input_tokens": prompt_prefixes(turn)[-1][1]}
    if flaw == "missing":
        counted = {}
    elif flaw == "not_finite":
        counted["input_tokens"] = math.nan
    return malformed(counted, flaw, headers)
