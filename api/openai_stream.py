"""The Chat Completions stream writer: an invocation's events as `chat.completion.chunk` lines
(`api/wire.relay` drives it). Text deltas — nearly every chunk — go through the lean encoder of
`api/sse.py`; the rest, once per stream or per tool call, through `chunk`. The stream opens with
the assistant role, and ends with the usage (when asked for), the `model_router` receipt chunk
and `[DONE]` — or, for a call cut after output, an explicit error, never a clean terminator."""

from __future__ import annotations

import uuid

from api import sse
from api.openai_shapes import chunk, delta_of, usage_body
from api.wire import receipt_view
from domain.close_reason import close_reason
from domain.failures import error_class
from domain.invocation import InvocationSummary
from providers.types import Finish, TextDelta, ToolCallDelta


class ChatChunks:
    __slots__ = ("_id", "_include_usage", "_profile", "text")

    def __init__(self, invocation_id: uuid.UUID, profile: str, include_usage: bool) -> None:
        self._id, self._profile, self._include_usage = invocation_id, profile, include_usage
        # A text delta's chunk: the lean encoder itself, called straight from the relay.
        self.text = sse.TextChunks(invocation_id, profile).text

    def start(self) -> bytes:
        return sse.line(chunk(self._id, self._profile, {"role": "assistant", "content": ""}))

    def add(self, event: TextDelta | ToolCallDelta | Finish) -> bytes:
        if type(event) is TextDelta:
            return self.text(event.text)
        delta, finish = delta_of(event)
        return sse.line(chunk(self._id, self._profile, delta, finish))

    def keep_alive(self) -> bytes:
        return sse.KEEP_ALIVE_COMMENT

    async def end(self, summary: InvocationSummary) -> bytes:
        out = b""
        if self._include_usage:
            usage = usage_body(summary.input_tokens, summary.output_tokens)
            out += sse.line(chunk(self._id, self._profile, usage=usage))
        out += sse.line(chunk(self._id, self._profile, model_router=receipt_view(summary)))
        return out + b"data: [DONE]\n\n"

    async def fail(self, summary: InvocationSummary) -> bytes:
        reason = summary.close_reason or close_reason(summary.outcome, summary.error_kind)
        return sse.line(
            {
                "error": {
                    "message": f"model call failed: {summary.error_kind}",
                    "type": summary.error_kind,
                    "code": summary.outcome,
                    "errorClass": error_class(summary.error_kind),
                    "receiptId": str(self._id),
                    "deploymentId": summary.deployment_id,
                    "closeReason": reason,
                }
            }
        )
