"""Provider-neutral request, stream events and results shared by every adapter.

The router speaks only these types; each adapter translates them to and from its provider's
wire shapes. They carry content (prompts, outputs), so they must never be logged or stored.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from enum import StrEnum
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

T = TypeVar("T")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ToolCall(_Model):
    """A complete tool call: `arguments` is the JSON text exactly as the model produced it."""

    id: str
    name: str
    arguments: str = "{}"


class Message(_Model):
    """One conversation turn. A `tool` message carries the result of `tool_call_id`."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    # A prompt-cache breakpoint the caller set at the end of this turn (Anthropic's
    # `cache_control`, e.g. {"type": "ephemeral"}); honoured by adapters whose provider takes
    # breakpoints, and not needed by those that cache prefixes by themselves (OpenAI). Left
    # out of dumps when unset, so request hashes (idempotency) stay what they were without it.
    cache_control: dict[str, Any] | None = Field(default=None, exclude_if=lambda v: v is None)
    # A tool result that reports the tool's failure (Anthropic's `is_error`, which coding agents
    # set on every failed command). Left out of dumps when unset, as cache_control is.
    is_error: bool = Field(default=False, exclude_if=lambda v: not v)
    # Who spoke the turn, told apart from others of its role (OpenAI's `name`, which the model
    # reads; AutoGen sets it on user and assistant messages). Left out of dumps when unset, as
    # cache_control is: the hash of a request without one is what it was before it was carried.
    name: str | None = Field(default=None, exclude_if=lambda v: v is None)

    @model_validator(mode="after")
    def _shape(self) -> Message:
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs tool_call_id")
        if self.name is not None and self.role == "tool":
            # OpenAI's tool message has no name: it would have nowhere to go.
            raise ValueError("a tool message carries no name")
        if self.is_error and self.role != "tool":
            raise ValueError("only tool messages report a tool's failure")
        if self.tool_calls and self.role != "assistant":
            raise ValueError("only assistant messages carry tool_calls")
        return self


class Tool(_Model):
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    strict: bool = False
    cache_control: dict[str, Any] | None = Field(default=None, exclude_if=lambda v: v is None)


class ToolChoice(_Model):
    """`auto` lets the model decide, `required` forces some tool, `tool` forces `name`."""

    mode: Literal["auto", "none", "required", "tool"] = "auto"
    name: str | None = None

    @model_validator(mode="after")
    def _named(self) -> ToolChoice:
        if (self.mode == "tool") != (self.name is not None):
            raise ValueError("name is given exactly when mode is 'tool'")
        return self


class ResponseFormat(_Model):
    type: Literal["text", "json_object", "json_schema"] = "text"
    name: str | None = None
    json_schema: dict[str, Any] | None = None
    strict: bool = True
    # What the output is for, as the caller described it to the model (OpenAI's
    # `json_schema.description`, Responses' `text.format.description`).
    description: str | None = None

    @model_validator(mode="after")
    def _schema(self) -> ResponseFormat:
        if (self.type == "json_schema") != (self.json_schema is not None):
            raise ValueError("json_schema is given exactly when type is 'json_schema'")
        return self


class ChatRequest(_Model):
    messages: tuple[Message, ...] = Field(min_length=1)
    tools: tuple[Tool, ...] = ()
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    stop: tuple[str, ...] = ()

    @field_validator("tool_choice")
    @classmethod
    def _choice_among_tools(cls, choice: ToolChoice | None, info: ValidationInfo) -> Any:
        """A choice that forces a tool needs one to force (OpenAI and Anthropic refuse it too):
        dropped, `required` with no tools was answered in plain text as if it had been met.
        Checked on the field (declared after `tools`), so the refusal names it."""
        if choice is None or choice.mode in ("auto", "none"):
            return choice
        tools = info.data.get("tools") or ()
        if not tools:
            raise ValueError(f"tool_choice {choice.mode!r} needs tools to choose from")
        if choice.name is not None and choice.name not in {t.name for t in tools}:
            raise ValueError(f"tool_choice names {choice.name!r}, which is not among the tools")
        return choice


class FinishReason(StrEnum):
    STOP = "stop"
    LENGTH = "length"
    TOOL_CALLS = "tool_calls"
    CONTENT_FILTER = "content_filter"
    OTHER = "other"


class Accepted(_Model):
    """The provider accepted the request and is answering: its headers are in, with the
    transport request id when it sent one. First on every stream, before any output, so that a
    stream that later stalls, breaks or garbles still names the provider's request."""

    type: Literal["accepted"] = "accepted"
    provider_request_id: str | None = None


class TextDelta(_Model):
    type: Literal["text_delta"] = "text_delta"
    text: str


class RefusalDelta(TextDelta):
    """Words of the model's refusal (OpenAI's `refusal`: a structured-output request it
    declined). Text on every surface, ended as content-filtered; on Chat Completions its own
    `refusal` field ending `stop`, as OpenAI answers it and its SDK reads it (`.parse()` gives
    `refusal` and no parsed object; as content, `.parse()` raised and `.stream()` tried the
    words as JSON)."""


class ToolCallDelta(_Model):
    """A fragment of tool call `index` (0-based, in call order). The first fragment of a call
    carries its id and name; `arguments_delta` fragments concatenate to the JSON arguments."""

    type: Literal["tool_call_delta"] = "tool_call_delta"
    index: int
    id: str | None = None
    name: str | None = None
    arguments_delta: str = ""


class UsageEvent(_Model):
    """Usage as the provider reported it. `input_tokens` counts every prompt token, cached or
    not; `cached_input_tokens` is the part read from the provider's prompt cache and
    `cache_write_input_tokens` the part written to it (Anthropic bills those differently)."""

    type: Literal["usage"] = "usage"
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int = 0
    cache_write_input_tokens: int = 0


class Finish(_Model):
    """The provider said the answer is over. `provider_request_id` is the transport request id
    (x-request-id / request-id header); `response_id` the id in the body (chatcmpl-…, msg_…)."""

    type: Literal["finish"] = "finish"
    reason: FinishReason
    provider_request_id: str | None = None
    response_id: str | None = None
    # The model the provider says answered (it may name a dated snapshot of the one asked for).
    response_model: str | None = None
    # Which of the request's stop sequences ended the answer, where the provider says
    # (Anthropic); an OpenAI deployment does not.
    stop_sequence: str | None = None
    # LENGTH because the model's context window was full, not because of max_tokens, where the
    # provider says (Anthropic's `model_context_window_exceeded`): raising max_tokens and going
    # on, as a client does after max_tokens, cannot help then.
    context_full: bool = Field(default=False, exclude_if=lambda v: not v)


class KeepAlive(_Model):
    """The provider says it is still there and has nothing to add yet: an Anthropic `ping`
    event, or a server-sent event that is only a comment (`: keep-alive`, as OpenAI-compatible
    relays send while a model thinks). It holds a stream's idle bound open, never its first
    token's (activities/resilience.timed_stream); once output has started the caller's stream
    carries it on as its surface's own keep-alive (api/wire.relay)."""

    type: Literal["keep_alive"] = "keep_alive"


# One instance serves every keep-alive: it carries nothing.
KEEP_ALIVE = KeepAlive()


StreamEvent = Annotated[
    Accepted | TextDelta | ToolCallDelta | UsageEvent | Finish | KeepAlive,
    Field(discriminator="type"),
]
# What a stream carries on past its bounds: everything but the keep-alives.
AnswerEvent = Accepted | TextDelta | ToolCallDelta | UsageEvent | Finish


class Usage(_Model):
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int = 0
    cache_write_input_tokens: int = 0


class Completion(_Model):
    """A whole answer, folded from stream events (or from a non-streamed response)."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage | None = None
    finish_reason: FinishReason
    provider_request_id: str | None = None
    response_id: str | None = None
    response_model: str | None = None
    stop_sequence: str | None = None
    # Cut because the context window was full (Finish.context_full); left out when not.
    context_full: bool = Field(default=False, exclude_if=lambda v: not v)
    # The text is the model's refusal (RefusalDelta); left out of the stored answer when not.
    refusal: bool = Field(default=False, exclude_if=lambda v: not v)
    # Text came after the tool calls (the answer ended in it): where a cut fell, for a surface
    # that names the item (Responses); left out when not.
    ends_in_text: bool = Field(default=False, exclude_if=lambda v: not v)
    # For each tool call (by index), how many characters of `text` had come before it began:
    # the order a whole answer and a replay give text and calls in, as the stream did. Left
    # out when every call came after all the text (and in answers stored before it was kept:
    # `in_order` then reads `ends_in_text`).
    text_at_calls: tuple[int, ...] = Field(default=(), exclude_if=lambda v: not v)

    def in_order(self) -> list[str | ToolCall]:
        """The answer's text runs and tool calls in the order they came. A whole answer put
        all its text first, so [text, tool_use, text] read [text, tool_use] with the second
        run joined to the first, unlike its stream and its replay."""
        calls = list(self.tool_calls)
        text = self.text
        positions = list(self.text_at_calls)
        if len(positions) != len(calls):  # none kept: all the text on one side of the calls
            at = 0 if self.ends_in_text else len(text)
            positions = [at] * len(calls)
        parts: list[str | ToolCall] = []
        done = 0
        for call, at in zip(calls, positions, strict=True):
            at = min(max(at, done), len(text))
            if at > done:
                parts.append(text[done:at])
            parts.append(call)
            done = at
        if done < len(text):
            parts.append(text[done:])
        return parts


def minted_call_id() -> str:
    """An id for a tool call its provider sent without one (some OpenAI-compatible servers):
    given once, where the call is read, so the live stream, the answer built from it and the
    stored answer a replay reads all say the same, and unique, so that a later turn's history
    never holds two calls of one id (numbered per answer, every turn's first call was `call_0`,
    and a provider that requires unique ids refused the session's next turn)."""
    return f"call_{uuid.uuid4().hex[:24]}"


class EmbeddingResult(_Model):
    vectors: tuple[tuple[float, ...], ...]
    input_tokens: int | None = None
    provider_request_id: str | None = None


class RerankItem(_Model):
    index: int
    relevance_score: float


class RerankResult(_Model):
    """Results ordered by descending relevance, as the provider ranked them."""

    results: tuple[RerankItem, ...]
    input_tokens: int | None = None
    search_units: int | None = None
    provider_request_id: str | None = None


class CallLimits(_Model):
    """One call's own bounds, set per profile or deployment and tighter or looser than the
    adapter's defaults: connecting, and the response's first byte (its status and headers,
    connection time included)."""

    connect: float | None = Field(default=None, gt=0)
    first_byte: float | None = Field(default=None, gt=0)


class ProviderTimeouts(_Model):
    """Per-phase HTTP timeouts in seconds. `read` bounds every wait for bytes, so it is also
    the longest silence tolerated mid-stream (first token included). `keepalive`: how long a
    connection left idle is kept for the next call (`Settings.provider_keepalive_seconds`,
    whose default this is, and the reason for it)."""

    connect: float = Field(gt=0)
    read: float = Field(gt=0)
    write: float = Field(default=10.0, gt=0)
    pool: float = Field(default=5.0, gt=0)
    keepalive: float = Field(default=120.0, gt=0)

    def as_timeout(self, build: Callable[..., T]) -> T:
        """These as an httpx-style Timeout of the given class (each SDK brings its own).

        `pool` is at least `connect`: the SDKs' aiohttp transport (the default,
        providers/transport.py) hands httpx's `pool` to aiohttp as its `connect`, the bound on
        getting a connection at all, a new one's handshake included (and `connect` as
        `sock_connect`). With the pool's 5 s, a deployment's `connect: 15` (or a
        `PROVIDER_CONNECT_TIMEOUT_SECONDS` past 5) still gave up at 5 s. Under httpx2 `pool`
        bounds only the wait for a free connection when all 1000 are in use."""
        return build(
            self.read,
            connect=self.connect,
            read=self.read,
            write=self.write,
            pool=max(self.pool, self.connect),
        )

    def merged(self, limits: CallLimits | None) -> ProviderTimeouts:
        """The HTTP timeouts of one call: these, with the call's own connect bound (which
        `as_timeout` keeps the pool bound from cutting short)."""
        if limits is None or limits.connect is None:
            return self
        return self.model_copy(update={"connect": limits.connect})
