"""The Chat Completions stream writer: an invocation's events as `chat.completion.chunk` lines
(`api/wire.relay` drives it). Text deltas — nearly every chunk — go through the lean encoder of
`api/sse.py`; the rest, once per stream or per tool call, through `chunk`. The stream opens with
the assistant role and ends as OpenAI's does: the finish chunk, then (when asked for) the usage
chunk with no choices, then `[DONE]`. The receipt's `model_router` object rides on the last of
those chunks, so a loop reading `choices[0]` never meets a chunk without choices it did not ask
for, and the SDK's stream helper, which takes each chunk's `usage` as the total, keeps the
usage (a separate receipt chunk after it set the total back to None). A call cut after output
ends with an explicit error, never a clean terminator: its `type` and `code` those a whole
response's error gives the failure (api/openai_errors.py `failure_names`).

The first tool call streams live; every later one is held and sent whole before the finish
chunk. An OpenAI deployment may interleave the fragments of parallel calls, and only the end
says the first is done; the SDK's helper takes a call as done once a chunk of another index
arrives: its `arguments.done` fired with half the arguments, and a strict tool's parse raised.
A client runs tools once the message has ended, so holding them costs it nothing.

A call that streamed no argument text (an Anthropic deployment's `tool_use` for a tool without
parameters sends one empty `partial_json`) gets `{}`, as the whole answer and a replay give it:
the held one sent so, the live one with one chunk of `{}` once it is done. Its arguments were
`""` live: the SDK's stream helper raised parsing a pydantic tool's, and JS's `JSON.parse("")`
throws."""

from __future__ import annotations

import uuid
from typing import Any

from api import sse
from api.openai_errors import failure_names
from api.openai_shapes import chunk, delta_of, refused_finish, usage_body
from api.wire import receipt_view
from domain.close_reason import close_reason
from domain.failures import error_class
from domain.invocation import InvocationSummary
from providers.types import Finish, RefusalDelta, TextDelta, ToolCallDelta


class ChatChunks:
    __slots__ = (
        "_created",
        "_finish",
        "_held",
        "_id",
        "_include_usage",
        "_live_call",
        "_live_said",
        "_profile",
        "_refused",
        "text",
    )

    def __init__(self, invocation_id: uuid.UUID, profile: str, include_usage: bool) -> None:
        self._id, self._profile, self._include_usage = invocation_id, profile, include_usage
        texts = sse.TextChunks(invocation_id, profile)
        # A text delta's chunk: the lean encoder itself, called straight from the relay.
        self.text = texts.text
        # Every other chunk carries the same `created`: the finish and usage chunks of a stream
        # longer than a second said a later one.
        self._created = texts.created
        self._finish: str | None = None  # the finish reason, sent at the end with the receipt
        self._live_call: int | None = None  # the tool call streaming live
        # Whether the live call has sent argument text: one that sent none ends with `{}`.
        self._live_said = False
        self._held: dict[int, dict[str, Any]] = {}  # calls begun while another streamed
        self._refused = False  # the text is the model's refusal (RefusalDelta)

    def start(self) -> bytes:
        return sse.line(
            chunk(
                self._id, self._profile, {"role": "assistant", "content": ""}, created=self._created
            )
        )

    def add(self, event: TextDelta | ToolCallDelta | Finish) -> bytes:
        if type(event) is TextDelta:
            return self.text(event.text)
        if type(event) is RefusalDelta:
            # OpenAI's own field for it, ending `stop` (below), as its SDK's helpers read it.
            self._refused = True
            return sse.line(
                chunk(self._id, self._profile, {"refusal": event.text}, created=self._created)
            )
        if type(event) is ToolCallDelta and self._live_call not in (None, event.index):
            self._hold(event)
            return b""
        delta, finish = delta_of(event)
        if finish is not None:
            self._finish = refused_finish(finish) if self._refused else finish
            return self._calls_done()
        if type(event) is ToolCallDelta:
            self._live_call = event.index
            self._live_said = self._live_said or event.arguments_delta != ""
        return sse.line(chunk(self._id, self._profile, delta, created=self._created))

    def _hold(self, event: ToolCallDelta) -> None:
        held = self._held.setdefault(
            event.index, {"index": event.index, "function": {"arguments": ""}}
        )
        if event.id is not None:
            held["id"], held["type"] = event.id, "function"
        if event.name is not None:
            held["function"]["name"] = event.name
        held["function"]["arguments"] += event.arguments_delta

    def _calls_done(self) -> bytes:
        """The live call's end, then the held calls whole: sent before the finish chunk, the
        live call's `{}` before any other call's chunk, which the SDK's helper takes as its end."""
        calls = [self._held.pop(index) for index in sorted(self._held)]
        if self._live_call is not None and not self._live_said:
            self._live_said = True  # once: at the Finish, or at the end when none came
            calls.insert(0, {"index": self._live_call, "function": {"arguments": "{}"}})
        for call in calls:
            if not call["function"]["arguments"]:
                call["function"]["arguments"] = "{}"
        return b"".join(
            sse.line(chunk(self._id, self._profile, {"tool_calls": [call]}, created=self._created))
            for call in calls
        )

    def keep_alive(self) -> bytes:
        return sse.KEEP_ALIVE_COMMENT

    async def end(self, summary: InvocationSummary) -> bytes:
        out = self._calls_done()
        # No Finish seen (none is expected on a completed call): the reason its output says.
        unsaid = "stop" if self._live_call is None else "tool_calls"
        last = chunk(self._id, self._profile, {}, self._finish or unsaid, created=self._created)
        if self._include_usage:
            out += sse.line(last)
            usage = usage_body(summary)
            last = chunk(self._id, self._profile, usage=usage, created=self._created)
        last["model_router"] = receipt_view(summary)
        return out + sse.line(last) + b"data: [DONE]\n\n"

    async def fail(self, summary: InvocationSummary) -> bytes:
        reason = summary.close_reason or close_reason(summary.outcome, summary.error_kind)
        kind = summary.error_kind or "provider_error"
        # The type and code a whole response's error gives the kind: the code said the outcome
        # (`Partial`, which the SDK raised as the APIError's code) and the type the gateway's
        # kind, where the same failure before output said `rate_limit_exceeded` or
        # `context_length_exceeded`, which agents act on.
        error_type, code = failure_names(kind)
        return sse.line(
            {
                "error": {
                    "message": f"model call failed: {kind}",
                    "type": error_type,
                    "code": code,
                    "errorClass": error_class(summary.error_kind),
                    "receiptId": str(self._id),
                    "deploymentId": summary.deployment_id,
                    "closeReason": reason,
                }
            }
        )
