"""OpenAI Responses answers: the Response object built from an answer and its receipt, its
output items (a message, function calls) and their ids, the usage as OpenAI words it, and the
status of an answer cut short. The request side is api/responses_shapes.py."""

from __future__ import annotations

import time
import uuid
from typing import Any

from api.responses_shapes import ResponsesIn
from domain.invocation import InvocationSummary
from providers.types import Completion, FinishReason, ToolCall


def response_id(invocation_id: uuid.UUID) -> str:
    return f"resp_{invocation_id.hex}"


def message_item_id(invocation_id: uuid.UUID, output_index: int = 0) -> str:
    suffix = f"_{output_index}" if output_index else ""
    return f"msg_{invocation_id.hex}{suffix}"


def call_item_id(invocation_id: uuid.UUID, index: int) -> str:
    return f"fc_{invocation_id.hex}_{index}"


def usage(summary: InvocationSummary) -> dict[str, Any]:
    """The receipt's usage: OpenAI counts cached tokens and cache writes inside input_tokens,
    as receipts do. The writes are the provider's report (Anthropic bills them dearer; they
    were always 0 here), on the live answer and on its receipt, which a replay reads them from
    (a receipt closed before it kept them says 0)."""
    tokens_in, tokens_out = summary.input_tokens or 0, summary.output_tokens or 0
    cached = summary.cached_input_tokens or 0
    written = min(summary.cache_write_input_tokens or 0, max(0, tokens_in - cached))
    return {
        "input_tokens": tokens_in,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": written},
        "output_tokens": tokens_out,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": tokens_in + tokens_out,
    }


def text_item(
    invocation_id: uuid.UUID, text: str, status: str, refusal: bool = False
) -> dict[str, Any]:
    content = [] if status == "in_progress" else [text_part(text, refusal)]
    return {
        "id": message_item_id(invocation_id),
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": content,
    }


def text_part(text: str, refusal: bool = False) -> dict[str, Any]:
    """An output_text part, or the model's refusal as OpenAI's own `refusal` part: as text,
    the SDK's `.parse()` and `.stream(text_format=…)` read the refusal's words as JSON and
    raised (providers.types.RefusalDelta)."""
    if refusal:
        return {"type": "refusal", "refusal": text}
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def call_item(invocation_id: uuid.UUID, index: int, call: ToolCall, status: str) -> dict[str, Any]:
    return {
        "id": call_item_id(invocation_id, index),
        "type": "function_call",
        "call_id": call.id,
        "name": call.name,
        "arguments": call.arguments if status != "in_progress" else "",
        "status": status,
    }


def output_items(invocation_id: uuid.UUID, completion: Completion) -> list[dict[str, Any]]:
    """The answer's items in the order it ended in (text after the calls when it came last,
    as its stream sent them)."""
    text = completion.text
    items = [
        call_item(invocation_id, i, c, "completed") for i, c in enumerate(completion.tool_calls)
    ]
    if text:
        message = text_item(invocation_id, text, "completed", completion.refusal)
        items.insert(len(items) if completion.ends_in_text else 0, message)
    if items and completion.finish_reason is FinishReason.LENGTH:
        items[-1]["status"] = CUT  # the item the cut fell in
    return items


# The status of the item an answer cut by max_output_tokens ended in: a call marked
# "completed" with half its arguments was run by agents as if whole.
CUT = "incomplete"


def status_of(
    finish: FinishReason | None, refusal: bool = False
) -> tuple[str, dict[str, str] | None]:
    """The response's status. A refusal in OpenAI's own part is a completed response, as
    OpenAI ends one; filtered text is incomplete."""
    if finish is FinishReason.LENGTH:
        return "incomplete", {"reason": "max_output_tokens"}
    if finish is FinishReason.CONTENT_FILTER and not refusal:
        return "incomplete", {"reason": "content_filter"}
    return "completed", None


def response_body(
    invocation_id: uuid.UUID,
    body: ResponsesIn,
    *,
    status: str,
    created_at: float,
    output: list[dict[str, Any]] | None = None,
    summary: InvocationSummary | None = None,
    incomplete: dict[str, str] | None = None,
    error: dict[str, str] | None = None,
) -> dict[str, Any]:
    text = body.text.model_dump(by_alias=True, exclude_none=True) if body.text else None
    return {
        "id": response_id(invocation_id),
        "object": "response",
        "created_at": created_at,
        "status": status,
        "completed_at": time.time() if status == "completed" else None,
        "error": error,
        "incomplete_details": incomplete,
        "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens,
        "metadata": body.metadata or {},
        "model": body.model,
        "output": output or [],
        "parallel_tool_calls": body.parallel_tool_calls is not False,
        "previous_response_id": None,
        "store": False,
        "temperature": body.temperature,
        "text": text or {"format": {"type": "text"}},
        "tool_choice": body.tool_choice or "auto",
        "tools": [t.model_dump(exclude_none=True) for t in body.tools or []],
        "top_p": None,
        "truncation": "disabled",
        "usage": usage(summary) if summary is not None else None,
    }
