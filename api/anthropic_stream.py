"""The Messages stream as the anthropic SDK reads it, built from normalised events: first
`message_start`, then per block `content_block_start` / `content_block_delta` (`text_delta`,
`input_json_delta`) / `content_block_stop`, then `message_delta` (stop reason, the receipt's
usage), the `model_router` event naming the receipt, and `message_stop`. A call that fails
after the stream began ends with `event: error` instead, never a clean stop."""

from __future__ import annotations

import json
import uuid
from typing import Any

from api.anthropic_shapes import message_id, receipt_event, stop_reason, usage
from domain.failures import error_class
from domain.invocation import InvocationSummary
from providers.types import Finish, FinishReason, TextDelta, ToolCallDelta

_ERRORS = {
    "rate_limit": "rate_limit_error",
    "overloaded": "overloaded_error",
    "timeout": "timeout_error",
    "content_policy": "invalid_request_error",
    "context_length": "invalid_request_error",
    "invalid_request": "invalid_request_error",
}


def sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


PING = sse("ping", {"type": "ping"})


class MessageEvents:
    """One stream's blocks. A text block closes when a tool call begins; tool blocks stay open
    until the end, since an OpenAI deployment may interleave fragments of parallel calls (the
    SDK places every delta by its block index)."""

    def __init__(self, invocation_id: uuid.UUID, profile: str) -> None:
        self._id = invocation_id
        self._profile = profile
        self._blocks = 0
        self._text: int | None = None
        self._tools: dict[int, int] = {}
        self._open: list[int] = []
        self._finish: FinishReason = FinishReason.STOP

    def start(self) -> bytes:
        message: dict[str, Any] = {
            "id": message_id(self._id),
            "type": "message",
            "role": "assistant",
            "model": self._profile,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            # The receipt's figures come with message_delta, which the SDK lets overwrite these.
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        return sse("message_start", {"type": "message_start", "message": message}) + sse(
            "ping", {"type": "ping"}
        )

    def _begin(self, block: dict[str, Any]) -> tuple[int, bytes]:
        index = self._blocks
        self._blocks += 1
        self._open.append(index)
        start = {"type": "content_block_start", "index": index, "content_block": block}
        return index, sse("content_block_start", start)

    def _stop(self, index: int) -> bytes:
        self._open.remove(index)
        return sse("content_block_stop", {"type": "content_block_stop", "index": index})

    def _delta(self, index: int, delta: dict[str, Any]) -> bytes:
        body = {"type": "content_block_delta", "index": index, "delta": delta}
        return sse("content_block_delta", body)

    def text(self, text: str) -> bytes:
        out = b""
        if self._text is None:
            self._text, out = self._begin({"type": "text", "text": ""})
        return out + self._delta(self._text, {"type": "text_delta", "text": text})

    def add(self, event: TextDelta | ToolCallDelta | Finish) -> bytes:
        out = b""
        if isinstance(event, Finish):
            self._finish = event.reason
        elif isinstance(event, TextDelta):
            out += self.text(event.text)
        else:
            block = self._tools.get(event.index)
            if block is None:
                if self._text is not None:
                    out += self._stop(self._text)
                    self._text = None
                tool = {
                    "type": "tool_use",
                    "id": event.id or f"toolu_{self._id.hex[:16]}_{event.index}",
                    "name": event.name or "",
                    "input": {},
                }
                block, started = self._begin(tool)
                self._tools[event.index] = block
                out += started
            if event.arguments_delta:
                delta = {"type": "input_json_delta", "partial_json": event.arguments_delta}
                out += self._delta(block, delta)
        return out

    def keep_alive(self) -> bytes:
        return PING  # as the Messages API sends it; the anthropic SDK skips it

    async def end(self, summary: InvocationSummary) -> bytes:
        out = b"".join(self._stop(i) for i in sorted(self._open))
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason(self._finish), "stop_sequence": None},
            "usage": usage(summary),
        }
        out += sse("message_delta", delta)
        out += sse("model_router", receipt_event(summary))
        return out + sse("message_stop", {"type": "message_stop"})

    async def fail(self, summary: InvocationSummary) -> bytes:
        kind = summary.error_kind or "provider_error"
        body = {
            "type": "error",
            "error": {
                "type": _ERRORS.get(kind, "api_error"),
                "message": f"model call failed after output began: {kind}",
            },
            **receipt_event(summary),
            # As on the surface's error responses: whether the same request may succeed later.
            "errorClass": error_class(kind),
        }
        body["type"] = "error"
        return sse("error", body)
