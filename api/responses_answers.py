"""OpenAI Responses answers: the Response object built from an answer and its receipt, its
output items (messages, function calls, in the order they came) and their ids, the usage as
OpenAI words it, and the status of an answer cut short; and, read back from an id, the items
of a stored answer that a later request's `item_reference` stands for. The request side is
api/responses_shapes.py."""

from __future__ import annotations

import re
import time
import uuid
from typing import Any

from pydantic import ValidationError

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


# The ids above, read back: the invocation whose answer holds the item.
_OWN_ITEM = re.compile(
    r"(?:msg_([0-9a-f]{32})(?:_[1-9][0-9]*)?|fc_([0-9a-f]{32})_(?:0|[1-9][0-9]*))"
)


def answered_by(item_id: str) -> uuid.UUID | None:
    """The invocation whose answer gave the output item `item_id` (one of ours); None for any
    other id."""
    match = _OWN_ITEM.fullmatch(item_id)
    return uuid.UUID(match.group(1) or match.group(2)) if match else None


def kept_items(invocation_id: uuid.UUID, stored: bytes) -> dict[str, dict[str, Any]]:
    """The output items of an invocation's stored answer (the artifact its receipt names and a
    replay of its key serves) by id, as its response gave them: what an `item_reference` to
    one of them stands for; none for an artifact that holds no chat answer (an embedding's)."""
    try:
        done = Completion.model_validate_json(stored)
    except ValidationError:
        return {}
    return {item["id"]: item for item in output_items(invocation_id, done)}


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
    invocation_id: uuid.UUID,
    text: str,
    status: str,
    refusal: bool = False,
    *,
    output_index: int = 0,
) -> dict[str, Any]:
    content = [] if status == "in_progress" else [text_part(text, refusal)]
    return {
        "id": message_item_id(invocation_id, output_index),
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
    """The answer's items in the order they came, as its stream and its replay send them: one
    message per run of text, each call where it began, and the same ids as the stream (a
    message's carries its output index). Built from the text and the calls, the whole answer
    put every call first or last and joined the runs of text around them into one message:
    [text, call, text] read [call, message] with the two texts fused, and the message's id was
    another than the stream's."""
    index = {id(call): i for i, call in enumerate(completion.tool_calls)}
    items = [
        text_item(invocation_id, part, "completed", completion.refusal, output_index=at)
        if isinstance(part, str)
        else call_item(invocation_id, index[id(part)], part, "completed")
        for at, part in enumerate(completion.in_order())
    ]
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
    created_at: int,
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
        # Integer Unix seconds, as OpenAI sends both (clients that type them so failed on
        # floats), live and replayed alike.
        "completed_at": int(time.time()) if status == "completed" else None,
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
        # As asked; "auto" changes nothing here (api/responses_shapes.py).
        "truncation": body.truncation or "disabled",
        "usage": usage(summary) if summary is not None else None,
    }
