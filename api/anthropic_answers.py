"""Anthropic Messages answers: a Message, and the pieces its stream shares (id, stop reason,
usage in Anthropic's split, a tool call's `input` object), built from the normalised answer
and the receipt (the request side is api/anthropic_shapes.py)."""

from __future__ import annotations

import uuid
from typing import Any

from jiter import from_json

from api.non_finite import holds_non_finite
from domain.invocation import InvocationSummary
from providers.types import Completion, FinishReason

_STOP = {
    FinishReason.STOP: "end_turn",
    FinishReason.LENGTH: "max_tokens",
    FinishReason.TOOL_CALLS: "tool_use",
    FinishReason.CONTENT_FILTER: "refusal",
    FinishReason.OTHER: "end_turn",
}


def message_id(invocation_id: uuid.UUID) -> str:
    return f"msg_{invocation_id.hex}"


def stop_reason(
    reason: FinishReason | str, stop_sequence: str | None = None, context_full: bool = False
) -> str:
    """Messages' stop reason; `stop_sequence` when the provider named the sequence that ended
    the answer (an Anthropic deployment: it was `end_turn`, and a loop telling a stop sequence
    from a natural end could not); `model_context_window_exceeded` when it said the context
    window was full (it was `max_tokens`, and a client raised max_tokens and went on, in vain)."""
    if stop_sequence is not None and FinishReason(reason) is FinishReason.STOP:
        return "stop_sequence"
    if context_full and FinishReason(reason) is FinishReason.LENGTH:
        return "model_context_window_exceeded"
    return _STOP.get(FinishReason(reason), "end_turn")


def usage(summary: InvocationSummary) -> dict[str, Any]:
    """The receipt's usage in Anthropic's split: `input_tokens` excludes what was read from and
    written to the cache, as the provider reported them (they cost 0.1 and 1.25 times input).
    A replay tells them from the receipt, which keeps both counts (a receipt closed before it
    kept its writes leaves them inside `input_tokens`)."""
    total = summary.input_tokens or 0
    cached = min(summary.cached_input_tokens or 0, total)
    written = min(summary.cache_write_input_tokens or 0, total - cached)
    return {
        "input_tokens": total - cached - written,
        "output_tokens": summary.output_tokens or 0,
        "cache_creation_input_tokens": written,
        "cache_read_input_tokens": cached,
    }


class ToolInputInvalid(ValueError):
    """A tool call whose arguments are no JSON object: Messages' `tool_use.input` is one."""

    def __init__(self, name: str) -> None:
        super().__init__(f"the tool call {name!r} has arguments that are not a JSON object")
        self.name = name


def tool_input(arguments: str, name: str, *, whole: bool = True) -> dict[str, Any]:
    """A tool call's arguments as Messages' `input` object. Only an OpenAI-compatible
    deployment's calls can fail here: their arguments are the model's own text. Such a call was
    answered as `input: {}` (the agent ran the tool with no arguments), or with a list as is;
    one holding NaN parsed, and the response could not be rendered (a 500). Raises
    ToolInputInvalid instead; also for a number too large for a float (`1e400`), which jiter
    reads as inf even with `allow_inf_nan=False`: answered whole, it was a 500 the anthropic
    SDK retried, each retry another billed provider call.

    `whole`: the call is complete, and must be one JSON object and nothing else. Otherwise
    (a stream's call so far, or an answer cut at max_tokens) it is read as the anthropic SDK
    reads a streamed call's fragments (jiter, partial): the members it holds whole. Blank
    arguments are the empty object."""
    text = arguments.strip() or "{}"
    try:
        value = from_json(text.encode(), partial_mode=not whole, allow_inf_nan=False)
    except ValueError:
        value = None
    if not isinstance(value, dict) or holds_non_finite(value):
        raise ToolInputInvalid(name)
    return value


def message_body(
    invocation_id: uuid.UUID, profile: str, completion: Completion, summary: InvocationSummary
) -> dict[str, Any]:
    whole = completion.finish_reason is not FinishReason.LENGTH  # not cut at max_tokens
    # The blocks in the order they came, as the stream and a replay send them (the text was put
    # first always: [tool_use, text] read [text, tool_use], and text on both sides of the calls
    # one block before them).
    content: list[dict[str, Any]] = [
        {"type": "text", "text": part}
        if isinstance(part, str)
        else {
            "type": "tool_use",
            "id": part.id,
            "name": part.name,
            "input": tool_input(part.arguments, part.name, whole=whole),
        }
        for part in completion.in_order()
    ]
    return {
        "id": message_id(invocation_id),
        "type": "message",
        "role": "assistant",
        "model": profile,
        "content": content,
        "stop_reason": stop_reason(
            completion.finish_reason, completion.stop_sequence, completion.context_full
        ),
        "stop_sequence": completion.stop_sequence,
        "usage": usage(summary),
    }
