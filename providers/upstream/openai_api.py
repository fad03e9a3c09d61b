"""OpenAI's chat completions wire protocol, as the simulator speaks it."""

from __future__ import annotations

import itertools
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from providers.upstream.answer import Answer, AnswerUsage
from providers.upstream.chat import BadRequest, Codec, StreamPlan, chat_endpoint, sse
from providers.upstream.problems import openai_error
from providers.upstream.tokens import fixed_chunks, text_chunks
from providers.upstream.turn import ChatTurn, ToolCallReply, ToolSpec, TurnMessage

_ERROR_TYPES = {401: ("invalid_request_error", "invalid_api_key"), 500: ("server_error", None)}


def _text(content: object) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text", ""))
            for p in content
            if isinstance(p, dict) and p.get("type") == "text"
        )
    raise BadRequest("messages[].content must be a string or a list of parts")


def _messages(raw: object) -> tuple[str, list[TurnMessage]]:
    if not isinstance(raw, list) or not raw:
        raise BadRequest("messages must be a non-empty array")
    system: list[str] = []
    out: list[TurnMessage] = []
    for item in raw:
        if not isinstance(item, dict):
            raise BadRequest("messages[] must be objects")
        role = item.get("role")
        if role in ("system", "developer"):
            system.append(_text(item.get("content")))
        elif role == "user":
            out.append(TurnMessage(role="user", text=_text(item.get("content"))))
        elif role == "assistant":
            calls = [
                ToolCallReply(
                    id=c.get("id"),
                    name=c.get("function", {}).get("name", ""),
                    arguments=c.get("function", {}).get("arguments", ""),
                )
                for c in item.get("tool_calls") or []
            ]
            out.append(
                TurnMessage(role="assistant", text=_text(item.get("content")), tool_calls=calls)
            )
        elif role == "tool":
            if not item.get("tool_call_id"):
                raise BadRequest("messages[].tool_call_id is required for role tool")
            out.append(
                TurnMessage(
                    role="tool", text=_text(item.get("content")), tool_call_id=item["tool_call_id"]
                )
            )
        else:
            raise BadRequest(
                "messages[].role is not one of system, developer, user, assistant, tool"
            )
    if not out:
        raise BadRequest("messages must hold at least one non-system message")
    return "\n".join(system), out


def _tool_choice(raw: object, has_tools: bool) -> tuple[str, str | None]:
    if raw is None:
        return ("auto" if has_tools else "none"), None
    if raw in ("auto", "none", "required"):
        return str(raw), None
    if isinstance(raw, dict) and isinstance(raw.get("function"), dict):
        return "tool", str(raw["function"].get("name"))
    raise BadRequest("tool_choice is not valid")


def parse(body: dict[str, Any]) -> ChatTurn:
    system, messages = _messages(body.get("messages"))
    tools = [
        ToolSpec(
            name=t["function"]["name"],
            description=t["function"].get("description"),
            parameters=t["function"].get("parameters") or {"type": "object"},
        )
        for t in body.get("tools") or []
        if isinstance(t, dict) and isinstance(t.get("function"), dict)
    ]
    choice, name = _tool_choice(body.get("tool_choice"), bool(tools))
    if name is not None and not any(t.name == name for t in tools):
        raise BadRequest("tool_choice names a tool that is not in tools")
    fmt = body.get("response_format") or {"type": "text"}
    schema = None
    if fmt.get("type") == "json_schema":
        schema = (fmt.get("json_schema") or {}).get("schema")
        if not isinstance(schema, dict):
            raise BadRequest("response_format.json_schema.schema is required")
    elif fmt.get("type") not in ("text", "json_object"):
        raise BadRequest("response_format.type is not valid")
    stop = body.get("stop")
    limit = body.get("max_completion_tokens") or body.get("max_tokens")
    return ChatTurn(
        api="openai",
        model=str(body["model"]),
        system=system,
        messages=messages,
        tools=tools,
        tool_choice=choice,
        tool_name=name,
        parallel_tool_calls=bool(body.get("parallel_tool_calls", True)),
        response_format=fmt["type"],
        json_schema=schema,
        max_tokens=int(limit) if limit else None,
        stop=[stop] if isinstance(stop, str) else list(stop or []),
        stream=bool(body.get("stream")),
        raw=body,
    )


def _usage(usage: AnswerUsage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_input_tokens, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
    }


def _base(answer: Answer, turn: ChatTurn, obj: str) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{answer.response_id}",
        "object": obj,
        "created": int(time.time()),
        "model": turn.model,
        "system_fingerprint": "fp_upstream_sim",
    }


def _finish(answer: Answer) -> str:
    if answer.finish == "context_window":
        return "length"  # OpenAI says no more than that
    return "stop" if answer.refused else answer.finish  # OpenAI ends a refusal as any answer


def render(answer: Answer, turn: ChatTurn, with_usage: bool) -> dict[str, Any]:
    # A Chat message has one content string: what was said after the calls is its end.
    said = answer.text + answer.text_after_calls
    message: dict[str, Any] = {
        "role": "assistant",
        "content": said if said or not answer.tool_calls else None,
        "refusal": None,
    }
    if answer.refused:
        message["content"], message["refusal"] = None, answer.text
    if answer.tool_calls:
        message["tool_calls"] = [
            {
                **({"id": c.id} if c.id else {}),  # none: NO_TOOL_CALL_IDS
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
            }
            for c in answer.tool_calls
        ]
    body = _base(answer, turn, "chat.completion")
    body["choices"] = [
        {"index": 0, "message": message, "finish_reason": _finish(answer), "logprobs": None}
    ]
    if with_usage:
        body["usage"] = _usage(answer.usage)
    return body


def stream(answer: Answer, turn: ChatTurn, with_usage: bool, interleave: bool) -> StreamPlan:
    include_usage = with_usage and bool((turn.raw.get("stream_options") or {}).get("include_usage"))
    base = _base(answer, turn, "chat.completion.chunk")

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        body = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        if include_usage:
            body["usage"] = None
        return sse(body)

    frames = [chunk({"role": "assistant", "content": "", "refusal": None})]
    said = "refusal" if answer.refused else "content"
    frames += [chunk({said: piece}) for piece in text_chunks(answer.text, answer.text_piece)]
    calls: list[list[bytes]] = []
    for index, call in enumerate(answer.tool_calls):
        head = {"index": index, **({"id": call.id} if call.id else {}), "type": "function"}
        calls.append(
            [chunk({"tool_calls": [{**head, "function": {"name": call.name, "arguments": ""}}]})]
        )
        calls[-1] += [
            chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]})
            for part in fixed_chunks(call.arguments)
        ]
    if interleave:  # the calls' frames in turns: a head or fragment of each, round and round
        frames += [f for turn_ in itertools.zip_longest(*calls) for f in turn_ if f is not None]
    else:
        frames += [f for call_frames in calls for f in call_frames]
    # Content after the calls' deltas, as vLLM streams what a model says after its calls.
    frames += [
        chunk({"content": p}) for p in text_chunks(answer.text_after_calls, answer.text_piece)
    ]
    frames.append(chunk({}, _finish(answer)))
    if include_usage:
        frames.append(sse({**base, "choices": [], "usage": _usage(answer.usage)}))
    return StreamPlan(frames=frames, terminator=sse("[DONE]"), content_start=0)


def error(status: int, message: str, request_id: str, headers: dict[str, str]) -> Response:
    type_, code = _ERROR_TYPES.get(status, ("invalid_request_error", None))
    return openai_error(status, message, type_=type_, code=code, headers=headers)


def api_key(request: Request) -> str | None:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


CODEC = Codec(
    api="openai",
    endpoint="chat.completions",
    request_id_header="x-request-id",
    tool_id_prefix="call_",
    parse=parse,
    render=render,
    stream=stream,
    error=error,
    api_key=api_key,
    caches=lambda turn: True,  # OpenAI caches prompt prefixes automatically
    reports_cache_writes=False,
)

chat_completions = chat_endpoint(CODEC)
