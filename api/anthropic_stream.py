"""The Messages stream as the anthropic SDK reads it, built from normalised events: first
`message_start`, then per block `content_block_start` / `content_block_delta` (`text_delta`,
`input_json_delta`) / `content_block_stop`, then `message_delta` (stop reason, the receipt's
usage, and the `model_router` object naming the receipt), and `message_stop`. A call that fails
after the stream began ends with `event: error` instead, never a clean stop."""

from __future__ import annotations

import json
import uuid
from typing import Any

from api.anthropic_answers import ToolInputInvalid, message_id, stop_reason, tool_input, usage
from api.anthropic_errors import failure_type
from api.wire import receipt_view
from domain.failures import error_class
from domain.invocation import InvocationSummary
from providers.types import Finish, FinishReason, TextDelta, ToolCallDelta


def sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


PING = sse("ping", {"type": "ping"})


# A live tool call's fragments go out once they make this share of its arguments so far, each
# batch checked (`MessageEvents`): a check parses the arguments so far, so checking every
# fragment cost the square of a long call's length (a 50 KB file written in 1,250 fragments:
# 31 MB parsed). With a batch an eighth of what came before it, the checks parse at most about
# nine times the call's length, and a short call's fragments still go out one by one.
TOOL_BATCH_SHARE = 8

_Key = tuple[str, int]  # ("text", n) for the n-th text block, ("tool", i) for tool call i


class MessageEvents:
    """One stream's blocks, strictly one after another, as the Messages API sends them: each
    block stops before the next starts (the TypeScript SDK's `contentBlock` event reports the
    last block of the snapshot at each stop, so blocks left open together were reported as the
    wrong one). One block streams live. Text is done once a tool call begins. A tool call that
    begins while another streams is held, with its fragments, and sent whole after it: an
    OpenAI deployment may interleave fragments of parallel calls, and only the end of the
    message says a call is complete (the client runs tools once the message has ended).

    A tool call's arguments are the model's own text on an OpenAI-compatible deployment, and
    the SDK parses each fragment as it comes (partially): a prefix that is no JSON object raised
    a ValueError inside the client, mid-stream. So the live call's fragments go out in batches
    (`TOOL_BATCH_SHARE`), each once its call so far reads as an object (`tool_input`), and a
    held call once all of it does; a call that does not ends the stream with an `error` event
    instead, nothing of it sent past the last batch that read."""

    def __init__(self, invocation_id: uuid.UUID, profile: str, input_estimate: int = 0) -> None:
        self._id = invocation_id
        self._profile = profile
        self._input_estimate = input_estimate
        self._blocks = 0
        self._texts = 0  # text blocks closed so far: the next text is a new block
        self._live: tuple[_Key, int] | None = None  # the block streaming, and its index
        self._held: dict[_Key, tuple[dict[str, Any], list[dict[str, Any]]]] = {}
        self._finish: FinishReason = FinishReason.STOP
        self._stop_sequence: str | None = None
        self._context_full = False
        self._args: dict[_Key, list[str]] = {}  # each tool call's fragments so far
        self._arg_bytes: dict[_Key, int] = {}
        self._names: dict[_Key, str] = {}
        self._unsent: list[dict[str, Any]] = []  # the live call's fragments not checked yet
        self._unsent_bytes = 0
        self._broken: str | None = None  # the call whose arguments are no JSON object

    def start(self) -> bytes:
        message: dict[str, Any] = {
            "id": message_id(self._id),
            "type": "message",
            "role": "assistant",
            "model": self._profile,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            # Our estimate of the input, where the Messages API reports it (clients that read
            # input tokens here saw 0); the receipt's figures come with message_delta, which the
            # SDK lets overwrite these. The cache fields as Anthropic's message_start has them,
            # always, numbers (0: the estimate knows of no cache): clients that read the input
            # only here (the AI SDK, older langchain-anthropic) found them missing.
            "usage": {
                "input_tokens": self._input_estimate,
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": 0,
                "output_tokens": 0,
            },
        }
        return sse("message_start", {"type": "message_start", "message": message}) + sse(
            "ping", {"type": "ping"}
        )

    def _begin(self, key: _Key, block: dict[str, Any]) -> bytes:
        index = self._blocks
        self._blocks += 1
        self._live = (key, index)
        start = {"type": "content_block_start", "index": index, "content_block": block}
        return sse("content_block_start", start)

    def _arguments(self, key: _Key) -> str:
        return "".join(self._args.get(key, ()))

    def _readable(self, key: _Key, *, whole: bool = False) -> bool:
        """Whether tool call `key`'s arguments so far read as an object (`whole`: are one, and
        complete); if not, the stream is broken from here."""
        if self._broken is None:
            try:
                tool_input(self._arguments(key), self._names.get(key, ""), whole=whole)
            except ToolInputInvalid as exc:
                self._broken = exc.name
        return self._broken is None

    def _check(self) -> bytes:
        """The live call's unchecked fragments, sent if its arguments still read. Blanks alone
        are kept back (the SDK cannot parse them by themselves), and dropped if nothing follows:
        the call's `input` is then the block's `{}`."""
        if not self._unsent or self._live is None:
            return b""
        if not self._arguments(self._live[0]).strip():
            return b""
        unsent, self._unsent, self._unsent_bytes = self._unsent, [], 0
        if not self._readable(self._live[0]):
            return b""
        return self._delta(_joined(unsent))

    def _tool_delta(self, delta: dict[str, Any]) -> bytes:
        self._unsent.append(delta)
        self._unsent_bytes += len(delta["partial_json"])
        assert self._live is not None
        so_far = self._arg_bytes.get(self._live[0], 0)
        return self._check() if self._unsent_bytes * TOOL_BATCH_SHARE >= so_far else b""

    def _stop(self) -> bytes:
        if self._live is None:
            return b""
        out = self._check()
        self._unsent, self._unsent_bytes = [], 0  # blanks alone: dropped
        if self._broken is not None:
            return out
        (kind, _), index = self._live
        self._live = None
        if kind == "text":
            self._texts += 1
        return out + sse("content_block_stop", {"type": "content_block_stop", "index": index})

    def _delta(self, delta: dict[str, Any]) -> bytes:
        assert self._live is not None
        body = {"type": "content_block_delta", "index": self._live[1], "delta": delta}
        return sse("content_block_delta", body)

    def _more(self, key: _Key, delta: dict[str, Any] | None) -> bytes | None:
        """Send `delta` of block `key` live, or hold it behind the live one; None when `key` is
        a block not seen yet (`_put` then starts or holds it)."""
        if self._live is not None and self._live[0] == key:
            if delta is None:
                return b""
            return self._tool_delta(delta) if key[0] == "tool" else self._delta(delta)
        held = self._held.get(key)
        if held is None:
            return None
        if delta is not None:
            held[1].append(delta)
        return b""

    def _put(self, key: _Key, block: dict[str, Any], delta: dict[str, Any] | None) -> bytes:
        """Start block `key` live with `delta`, or hold both behind the live block."""
        deltas = [delta] if delta is not None else []
        out = b""
        if self._live is not None and self._live[0][0] == "text" and key[0] == "tool":
            out += self._stop()  # text is done once a tool call begins
        if self._live is not None:
            self._held[key] = (block, deltas)
            return out
        out += self._begin(key, block)
        if key[0] == "tool":
            return out + b"".join(self._tool_delta(d) for d in deltas)
        return out + b"".join(self._delta(d) for d in deltas)

    def text(self, text: str) -> bytes:
        if not text:
            # Nothing said (an Anthropic deployment's text_delta may be empty): no block opens
            # for it, as the answer folded for the receipt, replays and the whole answer holds
            # none (providers/completion_fold.py); after a call it was an empty text block the
            # replay did not have, and Claude Code kept it in its history.
            return b""
        key, delta = ("text", self._texts), {"type": "text_delta", "text": text}
        sent = self._more(key, delta)  # a block seen before: no new block to build
        return sent if sent is not None else self._put(key, {"type": "text", "text": ""}, delta)

    def add(self, event: TextDelta | ToolCallDelta | Finish) -> bytes:
        if isinstance(event, Finish):
            self._finish, self._stop_sequence = event.reason, event.stop_sequence
            self._context_full = event.context_full
            return b""
        if isinstance(event, TextDelta):
            return self.text(event.text)
        if self._broken is not None:
            return b""  # nothing more of a stream that ends with an error
        key: _Key = ("tool", event.index)
        if event.arguments_delta:
            # Kept as fragments: appended to one string, a long call was copied at each.
            self._args.setdefault(key, []).append(event.arguments_delta)
            self._arg_bytes[key] = self._arg_bytes.get(key, 0) + len(event.arguments_delta)
        if event.name:
            self._names.setdefault(key, event.name)
        delta = None
        if event.arguments_delta:
            delta = {"type": "input_json_delta", "partial_json": event.arguments_delta}
        sent = self._more(key, delta)
        if sent is not None:
            return sent
        tool = {
            "type": "tool_use",
            "id": event.id or f"toolu_{self._id.hex[:16]}_{event.index}",
            "name": event.name or "",
            "input": {},
        }
        return self._put(key, tool, delta)

    def keep_alive(self) -> bytes:
        return PING  # as the Messages API sends it; the anthropic SDK skips it

    async def end(self, summary: InvocationSummary) -> bytes:
        # Complete now: each call must be one JSON object and nothing else (what read so far
        # may have had junk after it), unless the answer was cut at max_tokens.
        whole = self._finish is not FinishReason.LENGTH
        if self._live is not None and self._live[0][0] == "tool":
            self._readable(self._live[0], whole=whole)
        out = self._stop()
        for key, (block, deltas) in self._held.items():
            if key[0] == "tool":
                if not self._readable(key, whole=whole):
                    break
                if not self._arguments(key).strip():
                    deltas = []  # blanks alone: the block's `{}`
                deltas = [_joined(deltas)] if deltas else []
            out += self._begin(key, block) + b"".join(self._delta(d) for d in deltas)
            out += self._stop()
        self._held.clear()
        if self._broken is not None:
            return out + self._unreadable(summary, self._broken)
        delta = {
            "type": "message_delta",
            "delta": {
                "stop_reason": stop_reason(self._finish, self._stop_sequence, self._context_full),
                "stop_sequence": self._stop_sequence,
            },
            "usage": usage(summary),
            # The receipt rides on the last event with data, as an extra field the SDK keeps. An
            # event of its own was passed through as a RawMessageStartEvent without a message
            # (the SDK casts any event to its union), and code matching events by class
            # (pydantic-ai's) failed on it at the end of every stream.
            "model_router": receipt_view(summary),
        }
        out += sse("message_delta", delta)
        return out + sse("message_stop", {"type": "message_stop"})

    def _unreadable(self, summary: InvocationSummary, name: str) -> bytes:
        """The end of a stream whose tool call `name` is no JSON object: an `error` event (the
        SDK raises it), as a 502 answered whole says; another try may be answered well."""
        body = {
            "type": "error",
            "error": {"type": "api_error", "message": str(ToolInputInvalid(name))},
            **receipt_view(summary),
            "errorClass": "transient",
        }
        body["type"] = "error"
        return sse("error", body)

    async def fail(self, summary: InvocationSummary) -> bytes:
        kind = summary.error_kind or "provider_error"
        body = {
            "type": "error",
            "error": {
                "type": failure_type(kind),
                "message": f"model call failed after output began: {kind}",
            },
            **receipt_view(summary),
            # As on the surface's error responses: whether the same request may succeed later.
            "errorClass": error_class(kind),
        }
        body["type"] = "error"
        return sse("error", body)


def _joined(deltas: list[dict[str, Any]]) -> dict[str, Any]:
    """A call's held fragments as one `input_json_delta`: the SDK parses its buffer after each
    delta, and a blank first fragment sent alone (which some servers stream before the JSON)
    raised `Unable to parse tool parameter JSON` mid-stream."""
    return {"type": "input_json_delta", "partial_json": "".join(d["partial_json"] for d in deltas)}
