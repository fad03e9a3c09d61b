"""The Responses stream as the openai SDK's `responses.stream()` reads it, built from
normalised events: `response.created`, `response.in_progress`, then per output item
`response.output_item.added`, its deltas (`response.output_text.delta` inside a content part,
or `response.function_call_arguments.delta`) and their `.done` events, then
`response.completed` (or `response.incomplete` when the answer was cut by max_output_tokens,
the item it was cut in marked incomplete; a refusal is a `refusal` part with its own events)
with the receipt's usage and, on the response, the `model_router` object naming the receipt.
A call that fails after `response.created` ends with `response.failed`, never a silent stop;
its output holds the items streamed so far, the one open when it broke marked incomplete, its
`error.code` is the one a whole response's error gives the same kind, and its usage is the
receipt's when the receipt counted any. A streamed call that overflowed the context window
before any output is told so too (`failed_before_output`: created, in_progress, failed)."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from api.openai_errors import failure_code
from api.responses_answers import (
    CUT,
    call_item,
    call_item_id,
    message_item_id,
    response_body,
    status_of,
    text_item,
    text_part,
)
from api.responses_shapes import ResponsesIn
from api.sse import KEEP_ALIVE_COMMENT
from api.wire import receipt_view
from domain.failures import error_class
from domain.invocation import InvocationSummary
from providers.types import (
    Finish,
    FinishReason,
    RefusalDelta,
    TextDelta,
    ToolCall,
    ToolCallDelta,
)


@dataclass
class _Call:
    id: str
    name: str
    output_index: int = -1  # given as its item is added
    arguments: list[str] = field(default_factory=list)
    done: bool = False
    minted: bool = False  # its id is ours: the provider's, sent on a later fragment, replaces it
    # Begun while another call streamed: sent whole, in turn, once that one is done.
    held: bool = False

    def call(self) -> ToolCall:
        return ToolCall(id=self.id, name=self.name, arguments="".join(self.arguments) or "{}")


class ResponseEvents:
    def __init__(self, invocation_id: uuid.UUID, body: ResponsesIn) -> None:
        self._id = invocation_id
        self._body = body
        # Integer Unix seconds, as OpenAI sends it: clients typing it an integer fail on 1.7e9.
        self._created = int(time.time())
        self._sequence = 0
        self._items = 0
        self._text: list[str] | None = None
        self._text_index = -1
        self._text_id = ""
        self._text_done = False
        # The open message holds the model's refusal (RefusalDelta), in OpenAI's `refusal`
        # part and its own events, as the SDK's helpers read it; and whether any did.
        self._text_refusal = False
        self._refused = False
        self._calls: dict[int, _Call] = {}  # in the order they began
        # One item streams at a time, each done before the next is added, as OpenAI sends
        # them and as runtimes acting on `output_item.done` expect: the call streaming now.
        self._live_call: int | None = None
        self._finish: FinishReason | None = None
        self._done: list[tuple[int, dict[str, Any]]] = []
        self._done_calls: dict[int, int] = {}  # a done call item's output index -> its index

    def _event(self, kind: str, **data: Any) -> bytes:
        payload = {"type": kind, "sequence_number": self._sequence, **data}
        self._sequence += 1
        return f"event: {kind}\ndata: {json.dumps(payload, separators=(',', ':'))}\n\n".encode()

    def _response(self, status: str, **extra: Any) -> dict[str, Any]:
        return response_body(self._id, self._body, status=status, created_at=self._created, **extra)

    def start(self) -> bytes:
        return self._event("response.created", response=self._response("in_progress")) + (
            self._event("response.in_progress", response=self._response("in_progress"))
        )

    def _close_text(self, cut: bool = False) -> bytes:
        if self._text is None or self._text_done:
            return b""
        self._text_done = True
        text, refusal = "".join(self._text), self._text_refusal
        where = {"item_id": self._text_id, "output_index": self._text_index}
        status = CUT if cut else "completed"
        item = {**text_item(self._id, text, status, refusal), "id": self._text_id}
        self._done.append((self._text_index, item))
        if refusal:
            done = self._event("response.refusal.done", **where, content_index=0, refusal=text)
        else:
            done = self._event(
                "response.output_text.done", **where, content_index=0, text=text, logprobs=[]
            )
        part = text_part(text, refusal)
        return (
            done
            + self._event("response.content_part.done", **where, content_index=0, part=part)
            + self._event("response.output_item.done", output_index=self._text_index, item=item)
        )

    def _open_call(self, index: int, call: _Call) -> bytes:
        call.output_index, call.held = self._items, False
        self._items += 1
        item = call_item(self._id, index, call.call(), "in_progress")
        return self._event("response.output_item.added", output_index=call.output_index, item=item)

    def _arguments_delta(self, index: int, call: _Call, delta: str) -> bytes:
        return self._event(
            "response.function_call_arguments.delta",
            item_id=call_item_id(self._id, index),
            output_index=call.output_index,
            delta=delta,
        )

    def _close_live(self, cut: bool = False) -> bytes:
        live = self._calls.get(self._live_call) if self._live_call is not None else None
        if live is None or live.done:
            return b""
        assert self._live_call is not None
        return self._close_call(self._live_call, live, cut)

    def _send_held(self, cut_last: bool = False) -> bytes:
        """The calls begun while another streamed, each whole, in the order they began."""
        held = [(index, call) for index, call in self._calls.items() if call.held]
        out = b""
        for n, (index, call) in enumerate(held):
            out += self._open_call(index, call)
            if call.arguments:
                out += self._arguments_delta(index, call, "".join(call.arguments))
            out += self._close_call(index, call, cut_last and n == len(held) - 1)
        return out

    def _close_call(self, index: int, call: _Call, cut: bool = False) -> bytes:
        call.done = True
        status = CUT if cut else "completed"
        item = call_item(self._id, index, call.call(), status)
        self._done.append((call.output_index, item))
        self._done_calls[call.output_index] = index
        where = {"item_id": call_item_id(self._id, index), "output_index": call.output_index}
        return self._event(
            "response.function_call_arguments.done",
            **where,
            name=call.name,
            arguments=item["arguments"],
        ) + self._event("response.output_item.done", output_index=call.output_index, item=item)

    def text(self, text: str, refusal: bool = False) -> bytes:
        if not text:
            # Nothing to say (an Anthropic text_delta may be empty): no message opens for it,
            # as the answer folded for the receipt and replays holds none (output_items), or
            # the stream named an item the stored answer, and an item_reference, never had.
            return b""
        out = b""
        if self._text is not None and not self._text_done and refusal != self._text_refusal:
            out += self._close_text()  # words of the other kind: a message of their own
        if self._text is None or self._text_done:
            out += self._close_live() + self._send_held()  # the calls before it, done first
            # A message item opens (again, after a tool call: as a new item).
            self._text, self._text_index, self._text_done = [], self._items, False
            self._text_refusal = refusal
            self._text_id = message_item_id(self._id, self._items)
            self._items += 1
            item = {**text_item(self._id, "", "in_progress"), "id": self._text_id}
            out += self._event(
                "response.output_item.added", output_index=self._text_index, item=item
            )
            out += self._event(
                "response.content_part.added",
                item_id=self._text_id,
                output_index=self._text_index,
                content_index=0,
                part=text_part("", refusal),
            )
        self._text.append(text)
        if refusal:
            return out + self._event(
                "response.refusal.delta",
                item_id=self._text_id,
                output_index=self._text_index,
                content_index=0,
                delta=text,
            )
        return out + self._event(
            "response.output_text.delta",
            item_id=self._text_id,
            output_index=self._text_index,
            content_index=0,
            delta=text,
            logprobs=[],
        )

    def add(self, event: TextDelta | ToolCallDelta | Finish) -> bytes:
        if isinstance(event, Finish):
            self._finish = event.reason
            return b""
        if isinstance(event, TextDelta):
            refusal = type(event) is RefusalDelta
            self._refused |= refusal
            return self.text(event.text, refusal)
        call = self._calls.get(event.index)
        out = b""
        if call is None:
            # Only a call that begins ends the open message: the fold splits the text where a
            # call began (Completion.text_at_calls), never at a later fragment of one. (While
            # a message is open no call streams: opening it closed them all, so a later
            # fragment is only kept.) Closed at any fragment, text, a late fragment, text
            # streamed two messages where the stored answer, which a replay and an
            # item_reference read, holds one.
            out = self._close_text() + self._begin(event)
            call = self._calls[event.index]
        else:
            # A name or an id on a later fragment, as the receipt's answer takes them
            # (CompletionBuilder): the call's done event and the final response carry them.
            if event.name and not call.name:
                call.name = event.name
            if event.id and call.minted:
                call.id, call.minted = event.id, False
        if event.arguments_delta:
            # A fragment of a call already done (text came between it and its call) is kept
            # for the final response; its done event has gone out.
            call.arguments.append(event.arguments_delta)
            if event.index == self._live_call and not call.done:
                out += self._arguments_delta(event.index, call, event.arguments_delta)
        return out

    def _begin(self, event: ToolCallDelta) -> bytes:
        """Call `event.index`, begun by this fragment: streaming now (its item added), or held
        behind the call that is (added once that one is done)."""
        call = _Call(
            id=event.id or f"call_{self._id.hex[:16]}_{event.index}",
            name=event.name or "",
            minted=event.id is None,
        )
        self._calls[event.index] = call
        live = self._calls.get(self._live_call) if self._live_call is not None else None
        if live is None or live.done:
            self._live_call = event.index
            return self._open_call(event.index, call)
        call.held = True
        return b""

    def _close_all(self) -> bytes:
        """Every item still open, in order. Cut by max_output_tokens, the last of them is the
        one the cut fell in."""
        cut = self._finish is FinishReason.LENGTH
        held = any(call.held for call in self._calls.values())
        live = self._calls.get(self._live_call) if self._live_call is not None else None
        live_open = live is not None and not live.done
        out = self._close_text(cut and not live_open and not held)
        out += self._close_live(cut and not held)
        return out + self._send_held(cut)

    def _output(self, broken: bool = False) -> list[dict[str, Any]]:
        """The items done, in order; a call's as it stands now: fragments that came after its
        done event (text came between) are the answer's too, as its receipt and replay say.
        `broken`: with the items open when the stream broke."""
        items = [*self._done, *self._open_items()] if broken else self._done
        output = []
        for output_index, item in sorted(items, key=lambda pair: pair[0]):
            index = self._done_calls.get(output_index)
            if index is not None:
                call = self._calls[index]
                item = call_item(self._id, index, call.call(), item["status"])
            output.append(item)
        return output

    def _open_items(self) -> list[tuple[int, dict[str, Any]]]:
        """The message or call open when the stream broke, as its deltas built it at the
        caller, marked incomplete: `response.failed` listed only the items done, though the
        words had reached the caller and the receipt is Partial. A call held behind the open
        one was never sent: it is not among them."""
        items = []
        if self._text is not None and not self._text_done:
            text = text_item(self._id, "".join(self._text), CUT, self._text_refusal)
            items.append((self._text_index, {**text, "id": self._text_id}))
        live = self._calls.get(self._live_call) if self._live_call is not None else None
        if live is not None and not live.done:
            assert self._live_call is not None
            call = call_item(self._id, self._live_call, live.call(), CUT)
            items.append((live.output_index, {**call, "arguments": "".join(live.arguments)}))
        return items

    def keep_alive(self) -> bytes:
        # The Responses stream has no keep-alive event of its own: a comment, which the
        # openai SDK's reader skips (and which takes no sequence number).
        return KEEP_ALIVE_COMMENT

    async def end(self, summary: InvocationSummary) -> bytes:
        out = self._close_all()
        status, incomplete = status_of(self._finish, self._refused)
        response = self._response(
            status, output=self._output(), summary=summary, incomplete=incomplete
        )
        # On the final response, as on a failed one and a whole answer's body: an event of its
        # own was cast by the SDK to the first event class of its union (an audio delta).
        response["model_router"] = receipt_view(summary)
        kind = "response.completed" if status == "completed" else "response.incomplete"
        return out + self._event(kind, response=response)

    async def fail(self, summary: InvocationSummary) -> bytes:
        kind = summary.error_kind or "provider_error"
        return self._failed(summary, f"model call failed after output began: {kind}")

    def failed_before_output(self, summary: InvocationSummary) -> bytes:
        """A call that failed before any output, told as a whole stream: `response.created`,
        `response.in_progress`, `response.failed`, in the words its error response has
        (api/wire.py `failure_response`). For the failures an agent acts on only in a stream
        (api/routers/responses.py)."""
        kind = summary.error_kind or "provider_error"
        message = f"model call failed: {kind}"
        if summary.error_reason:
            message = f"{message}: {summary.error_reason}"
        return self.start() + self._failed(summary, message)

    def _failed(self, summary: InvocationSummary, message: str) -> bytes:
        kind = summary.error_kind or "provider_error"
        error = {
            # Every kind was `server_error` here, where the same kind failing before output
            # is answered with OpenAI's own code (`rate_limit_exceeded`,
            # `context_length_exceeded`, …) or the gateway's kind: code matching on the code
            # (Codex, the Agents SDK) saw a different failure depending on when it struck.
            "code": failure_code(kind),
            "message": message,
            # As on the surface's error responses: whether the same request may succeed later.
            "errorClass": error_class(kind),
        }
        # The receipt's usage when it counted any (a Partial counts the output that reached
        # the caller, activities/invoke_attempts.py): `usage: null` left a client adding
        # up its tokens with nothing for a call it was billed for in part.
        counted = summary.input_tokens is not None or summary.output_tokens is not None
        response = self._response(
            "failed",
            output=self._output(broken=True),
            error=error,
            summary=summary if counted else None,
        )
        response["model_router"] = receipt_view(summary)
        return self._event("response.failed", response=response)
