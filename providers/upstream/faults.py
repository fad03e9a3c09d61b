"""Injected failures, per model (or "*" for every model), optionally per endpoint.

Gate faults replace the answer (an error status, or no answer at all); shape faults change how
a real answer is delivered (late, cut, stalled, unterminated, unbilled) and combine. A fault
with `times` applies to that many matching requests and then disappears; without, it stays
until cleared.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Endpoint = Literal["chat.completions", "messages", "count_tokens", "embeddings", "rerank"]
Flaw = Literal["missing", "not_finite", "unreadable", "untrimmed"]
ANY_MODEL = "*"


class FaultKind(StrEnum):
    # gate faults
    RATE_LIMIT = "rate_limit"  # 429, Retry-After when retry_after is set
    SERVER_ERROR = "server_error"  # 500
    UNAVAILABLE = "unavailable"  # 503
    OVERLOADED = "overloaded"  # Anthropic 529 overloaded_error; OpenAI 503 "overloaded"
    HANG = "hang"  # accept the request, never answer
    CONTEXT_LENGTH = "context_length"  # 400 the provider's context-length error
    CONTENT_POLICY = "content_policy"  # 400 the provider's content-policy error
    AUTH = "auth"  # 401
    # the account cannot pay: OpenAI 429 insufficient_quota; Anthropic 400 invalid_request_error
    # "Your credit balance is too low…"
    QUOTA = "quota"
    # 400 invalid_request_error, for a provider's other 400s (`message`, `code`)
    INVALID_REQUEST = "invalid_request"
    REDIRECT = "redirect"  # 307 to `location`, as a hostile or moved endpoint answers
    # the request read, then after `delay` seconds the connection closed without a byte of
    # answer, as a server that died mid-generation or a load balancer's idle cut does
    HANG_UP = "hang_up"
    # shape faults
    SLOW_FIRST_TOKEN = "slow_first_token"  # noqa: S105 - `delay` seconds before the first content
    STREAM_CUT = "stream_cut"  # connection dropped after `after_chunks` SSE events
    STREAM_STALL = "stream_stall"  # silence after `after_chunks` events, connection kept
    # after `after_chunks` events (or all of them), `delay` seconds with nothing but a
    # keep-alive every `interval` (Anthropic a `ping` event, OpenAI an SSE comment), then the
    # rest of the stream
    KEEP_ALIVE = "keep_alive"
    MALFORMED_CHUNK = "malformed_chunk"  # after `after_chunks` events, one that is not JSON
    # after `after_chunks` events, `size` bytes of one event's data with no line end (a proxy
    # relaying a file, say), then silence with the connection kept
    ENDLESS_LINE = "endless_line"
    # after `after_chunks` events, the protocol's in-stream error event, and nothing after it
    # (Anthropic `event: error` overloaded_error; OpenAI a chunk carrying `error`)
    STREAM_ERROR = "stream_error"
    MISSING_TERMINATOR = "missing_terminator"  # no [DONE] / message_stop
    NO_USAGE = "no_usage"  # usage omitted
    # Chat Completions streams: parallel tool calls' fragments sent interleaved (each call's
    # head, then their arguments in turns), as an OpenAI deployment may; Anthropic never does
    INTERLEAVED_TOOL_CALLS = "interleaved_tool_calls"
    # Chat Completions streams: every fragment of a call repeats its id, type and name, and
    # calls are numbered from 1, as some OpenAI-compatible servers stream them
    REPEATED_TOOL_CALL_HEADS = "repeated_tool_call_heads"
    # Chat Completions streams: every parallel call at index 0, each with its own id, as
    # Ollama and Dynamo stream them
    SHARED_TOOL_CALL_INDEX = "shared_tool_call_index"
    # Chat Completions: tool calls without an `id`, as some OpenAI-compatible servers answer
    # them (stream and whole); Anthropic's always carry one
    NO_TOOL_CALL_IDS = "no_tool_call_ids"
    # embeddings, rerank and count_tokens: a 200 whose body the protocol does not allow, as
    # `flaw` says; a whole Chat Completions answer: its content as a list of parts
    MALFORMED_ANSWER = "malformed_answer"

    @property
    def gate(self) -> bool:
        return self in _GATES


_GATES = frozenset(
    {
        FaultKind.RATE_LIMIT,
        FaultKind.SERVER_ERROR,
        FaultKind.UNAVAILABLE,
        FaultKind.OVERLOADED,
        FaultKind.HANG,
        FaultKind.CONTEXT_LENGTH,
        FaultKind.CONTENT_POLICY,
        FaultKind.AUTH,
        FaultKind.QUOTA,
        FaultKind.INVALID_REQUEST,
        FaultKind.REDIRECT,
        FaultKind.HANG_UP,
    }
)


class Fault(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: FaultKind
    times: int | None = Field(default=None, ge=1)
    endpoint: Endpoint | None = None
    retry_after: float | None = Field(default=None, ge=0)
    # rate_limit only: the Retry-After header's text sent exactly as given, in place of
    # `retry_after`, as a broken provider or proxy sends it ("inf", "1e400").
    retry_after_text: str | None = None
    # Error statuses: the error's message in place of the provider's usual words, sent with its
    # non-ASCII characters escaped (half a surrogate pair included).
    message: str | None = None
    # Error statuses and stream_error: the error's code in place of its usual one, OpenAI's
    # `error.code` (a number too: vLLM and LiteLLM put the HTTP status there, 500 or "429"),
    # Anthropic's `error.details.error_code` (a spend limit's `enforced_spend_limit_reached`,
    # an `organization_on_hold`).
    code: str | int | None = None
    delay: float = Field(default=1.0, ge=0)
    after_chunks: int = Field(default=2, ge=0)
    # keep_alive only: seconds between two keep-alives.
    interval: float = Field(default=0.25, gt=0)
    # stream_cut only: end the body cleanly instead of dropping the connection, as a proxy
    # that gives up on a long stream does; the client sees a stream without its ending.
    graceful: bool = False
    # malformed_answer only: `missing` leaves one input's vector out (embeddings), names a
    # document past the last (rerank) or leaves the count out (count_tokens); `not_finite` puts
    # NaN in a vector, a score or the count; `unreadable` sends an HTML page as the body;
    # `untrimmed` (rerank) answers every document whatever top_n says, as TEI does.
    flaw: Flaw = "unreadable"
    # redirect only: where to.
    location: str | None = None
    # endless_line only: how many bytes the line runs to.
    size: int = Field(default=32 * 2**20, ge=1)


class FaultSpec(Fault):
    """The admin endpoint's body: a fault and the model it applies to."""

    model: str = ANY_MODEL


class FaultBook:
    def __init__(self) -> None:
        self._faults: dict[str, list[Fault]] = {}

    def add(self, model: str, fault: Fault) -> None:
        self._faults.setdefault(model, []).append(fault.model_copy())

    def clear(self, model: str | None = None) -> None:
        if model is None:
            self._faults.clear()
        else:
            self._faults.pop(model, None)

    def listing(self) -> list[FaultSpec]:
        return [
            FaultSpec(model=model, **fault.model_dump())
            for model, faults in self._faults.items()
            for fault in faults
        ]

    def take(self, model: str, endpoint: Endpoint) -> tuple[Fault | None, list[Fault]]:
        """The faults this request meets: the first gate fault, else every shape fault.
        Counted faults are consumed only when they apply."""
        candidates = [
            (key, f)
            for key in (model, ANY_MODEL)
            for f in self._faults.get(key, [])
            if f.endpoint is None or f.endpoint == endpoint
        ]
        gate = next(((k, f) for k, f in candidates if f.kind.gate), None)
        applied = [gate] if gate else [(k, f) for k, f in candidates if not f.kind.gate]
        for key, fault in applied:
            self._consume(key, fault)
        return (gate[1] if gate else None), ([] if gate else [f for _, f in applied])

    def _consume(self, key: str, fault: Fault) -> None:
        if fault.times is None:
            return
        fault.times -= 1
        if fault.times == 0:
            self._faults[key] = [f for f in self._faults[key] if f is not fault]
