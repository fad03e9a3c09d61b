"""Anthropic messages through the official SDK, mapped to and from the normalised types."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Iterator
from typing import Any

import anthropic
import httpx2
from anthropic.types import Message as AnthropicMessage

from providers import log_guard
from providers.base import ProviderAdapter
from providers.errors import (
    ErrorKind,
    ProviderError,
    kind_from_status,
    mid_stream,
    retry_after_seconds,
    stream_incomplete,
    transport_error,
)
from providers.secrets import Connection
from providers.types import (
    Accepted,
    CallLimits,
    ChatRequest,
    Completion,
    Finish,
    FinishReason,
    Message,
    ProviderTimeouts,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
    UsageEvent,
    collect_events,
)

DEFAULT_MAX_TOKENS = 4096
_FAILURES = (anthropic.AnthropicError, httpx2.HTTPError, OSError)
_STOP = {
    "end_turn": FinishReason.STOP,
    "stop_sequence": FinishReason.STOP,
    "pause_turn": FinishReason.STOP,
    "max_tokens": FinishReason.LENGTH,
    "model_context_window_exceeded": FinishReason.LENGTH,
    "tool_use": FinishReason.TOOL_CALLS,
    "refusal": FinishReason.CONTENT_FILTER,
}
_EPHEMERAL = {"type": "ephemeral"}
_CHOICE = {"auto": "auto", "none": "none", "required": "any", "tool": "tool"}
_ERROR_TYPES = {
    "rate_limit_error": ErrorKind.RATE_LIMIT,
    "overloaded_error": ErrorKind.OVERLOADED,
    "api_error": ErrorKind.SERVER,
    "timeout_error": ErrorKind.TIMEOUT,
    "authentication_error": ErrorKind.AUTH,
    "permission_error": ErrorKind.AUTH,
    "billing_error": ErrorKind.QUOTA,
    "not_found_error": ErrorKind.NOT_FOUND,
    "request_too_large": ErrorKind.INVALID_REQUEST,
}
# The SDK traces calls with OpenTelemetry; metadata only, whatever the environment asks for,
# because prompts and outputs never reach spans.
_TELEMETRY: Any = {"traces": {"content_mode": "metadata_only"}}


def map_error(exc: Exception, provider: str) -> ProviderError:
    if isinstance(exc, anthropic.APITimeoutError):
        return ProviderError(ErrorKind.TIMEOUT, provider=provider, reason="timed out")
    if isinstance(exc, anthropic.APIConnectionError):
        return ProviderError(ErrorKind.CONNECTION, provider=provider, reason="connection error")
    if isinstance(exc, anthropic.APIStatusError):
        # Errors inside a stream arrive with the stream's status, 200: the type decides.
        error_type = exc.type if isinstance(exc.type, str) else None
        message = exc.api_message
        kind = _ERROR_TYPES.get(error_type or "")
        if kind is None:
            status = exc.status_code if exc.status_code >= 400 else 500
            kind = kind_from_status(status, error_type, message)
        return ProviderError(
            kind,
            provider=provider,
            status_code=exc.status_code,
            code=error_type,
            reason=message,
            retry_after=retry_after_seconds(exc.response.headers),
            provider_request_id=exc.request_id,
        )
    mapped = transport_error(exc, provider=provider)
    if mapped is not None:
        return mapped
    return ProviderError(ErrorKind.SERVER, provider=provider, reason=type(exc).__name__)


def _tool_input(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {}


def _blocks(message: Message) -> tuple[str, list[dict[str, Any]]]:
    blocks: list[dict[str, Any]]
    if message.role == "tool":
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.tool_call_id}
        blocks = [{**block, "content": message.content or ""}]
    else:
        blocks = []
        if message.content:
            blocks.append({"type": "text", "text": message.content})
        blocks += [
            {"type": "tool_use", "id": c.id, "name": c.name, "input": _tool_input(c.arguments)}
            for c in message.tool_calls
        ]
    if message.cache_control is not None and blocks:
        blocks[-1]["cache_control"] = dict(message.cache_control)
    return ("user" if message.role == "tool" else message.role), blocks


def _explicit_cache(request: ChatRequest) -> bool:
    return any(m.cache_control is not None for m in request.messages) or any(
        t.cache_control is not None for t in request.tools
    )


def _system(request: ChatRequest, prompt_caching: bool) -> str | list[dict[str, Any]] | None:
    system = [m for m in request.messages if m.role == "system"]
    if not system:
        return None
    if _explicit_cache(request):
        # The caller placed its own breakpoints: one block per system turn, each as marked.
        return [
            {
                "type": "text",
                "text": m.content or "",
                **({"cache_control": dict(m.cache_control)} if m.cache_control else {}),
            }
            for m in system
        ]
    text = "\n\n".join(m.content or "" for m in system)
    if prompt_caching:
        return [{"type": "text", "text": text, "cache_control": dict(_EPHEMERAL)}]
    return text


def convert(request: ChatRequest, model: str, *, prompt_caching: bool = True) -> dict[str, Any]:
    """The messages.create arguments. System messages become `system`; tool results become
    user turns; consecutive turns of one role merge, as the API requires alternation.

    Breakpoints the caller set (`cache_control` on turns and tools, from the Messages surface)
    are passed as given, and then no others are added (the API allows four). Otherwise, with
    prompt_caching, cache breakpoints go on the system prompt and on the end of the history
    before the newest turn, so an agent's growing conversation is read from the cache instead
    of billed in full each turn (Anthropic ignores them below its minimum length)."""
    turns: list[dict[str, Any]] = []
    for message in request.messages:
        if message.role == "system":
            continue
        role, blocks = _blocks(message)
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    params: dict[str, Any] = {
        "model": model,
        "messages": turns,
        "max_tokens": request.max_tokens or DEFAULT_MAX_TOKENS,
    }
    automatic = prompt_caching and not _explicit_cache(request)
    if automatic and len(turns) >= 2 and turns[-2]["content"]:
        turns[-2]["content"][-1]["cache_control"] = dict(_EPHEMERAL)
    system = _system(request, automatic)
    if system:
        params["system"] = system
    if request.tools:
        params["tools"] = [
            {
                "name": t.name,
                **({"description": t.description} if t.description else {}),
                "input_schema": t.parameters,
                **({"strict": True} if t.strict else {}),
                **({"cache_control": dict(t.cache_control)} if t.cache_control else {}),
            }
            for t in request.tools
        ]
        choice = request.tool_choice
        mode = choice.mode if choice is not None else "auto"
        tool_choice: dict[str, Any] = {"type": _CHOICE[mode]}
        if mode == "tool" and choice is not None:
            tool_choice["name"] = choice.name
        if request.parallel_tool_calls is False and mode != "none":
            tool_choice["disable_parallel_tool_use"] = True
        params["tool_choice"] = tool_choice
    fmt = request.response_format
    if fmt is not None and fmt.type != "text":
        schema = fmt.json_schema if fmt.type == "json_schema" else {"type": "object"}
        params["output_config"] = {"format": {"type": "json_schema", "schema": schema}}
    if request.stop:
        params["stop_sequences"] = list(request.stop)
    if request.temperature is not None:
        # Not a typed argument of this SDK's messages.create; older models still accept it.
        params["extra_body"] = {"temperature": request.temperature}
    return params


class _Usage:
    """Anthropic splits usage between message_start and message_delta, and leaves cached
    tokens out of input_tokens; this adds them back so input_tokens counts the whole prompt."""

    def __init__(self) -> None:
        self.fresh: int | None = None
        self.output: int | None = None
        self.read = 0
        self.write = 0

    def update(self, usage: Any) -> None:
        if usage is None:
            return
        if getattr(usage, "input_tokens", None) is not None:
            self.fresh = usage.input_tokens
        if getattr(usage, "output_tokens", None) is not None:
            self.output = usage.output_tokens
        self.read = getattr(usage, "cache_read_input_tokens", None) or self.read
        self.write = getattr(usage, "cache_creation_input_tokens", None) or self.write

    def event(self) -> UsageEvent | None:
        if self.fresh is None or self.output is None:
            return None
        return UsageEvent(
            input_tokens=self.fresh + self.read + self.write,
            output_tokens=self.output,
            cached_input_tokens=self.read,
            cache_write_input_tokens=self.write,
        )


class AnthropicAdapter(ProviderAdapter):
    def __init__(
        self,
        *,
        model: str,
        connection: Connection,
        timeouts: ProviderTimeouts,
        provider: str = "anthropic",
        prompt_caching: bool = True,
    ) -> None:
        log_guard.install()
        self.provider = provider
        self.model = model
        self._prompt_caching = prompt_caching
        self.timeouts, self.timeout_type = timeouts, anthropic.Timeout
        self._client = anthropic.AsyncAnthropic(
            api_key=connection.api_key.get_secret_value(),
            base_url=connection.base_url or "https://api.anthropic.com",
            timeout=timeouts.as_timeout(anthropic.Timeout),
            max_retries=0,
            open_telemetry=_TELEMETRY,
        )

    async def stream(
        self, request: ChatRequest, *, limits: CallLimits | None = None
    ) -> AsyncGenerator[StreamEvent, None]:
        params = convert(request, self.model, prompt_caching=self._prompt_caching)
        try:
            events = await self.first_byte(
                self._client.messages.create(**params, stream=True, **self.call_timeout(limits)),
                limits,
            )
        except _FAILURES as exc:
            raise map_error(exc, self.provider) from None
        request_id = events.response.headers.get("request-id")
        response_id: str | None = None
        response_model: str | None = None
        usage = _Usage()
        stop_reason: str | None = None
        tool_index: dict[int, int] = {}
        try:
            async with events:
                yield Accepted(provider_request_id=request_id)
                async for event in events:
                    if event.type == "message_start":
                        response_id = event.message.id
                        response_model = event.message.model
                        usage.update(getattr(event.message, "usage", None))
                    elif event.type == "content_block_start":
                        block = event.content_block
                        if block.type == "tool_use":
                            tool_index[event.index] = len(tool_index)
                            yield ToolCallDelta(
                                index=tool_index[event.index], id=block.id, name=block.name
                            )
                        elif block.type == "text" and block.text:
                            yield TextDelta(text=block.text)
                    elif event.type == "content_block_delta":
                        delta = event.delta
                        if delta.type == "text_delta":
                            yield TextDelta(text=delta.text)
                        elif delta.type == "input_json_delta" and event.index in tool_index:
                            yield ToolCallDelta(
                                index=tool_index[event.index], arguments_delta=delta.partial_json
                            )
                    elif event.type == "message_delta":
                        stop_reason = event.delta.stop_reason or stop_reason
                        usage.update(getattr(event, "usage", None))
                        if stop_reason is not None:
                            # The answer and its usage are complete: a provider that never
                            # sends message_stop (or never closes) must not hold the call.
                            break
        except _FAILURES as exc:
            raise mid_stream(map_error(exc, self.provider), request_id) from None
        # The stop reason ends the answer; a missing message_stop after it loses nothing.
        if stop_reason is None:
            raise stream_incomplete(self.provider, request_id)
        usage_event = usage.event()
        if usage_event is not None:
            yield usage_event
        yield Finish(
            reason=_STOP.get(stop_reason, FinishReason.OTHER),
            provider_request_id=request_id,
            response_id=response_id,
            response_model=response_model,
        )

    async def complete(
        self, request: ChatRequest, *, limits: CallLimits | None = None
    ) -> Completion:
        try:
            raw = await self.first_byte(
                self._client.messages.with_raw_response.create(
                    **convert(request, self.model, prompt_caching=self._prompt_caching),
                    **self.call_timeout(limits),
                ),
                limits,
            )
            message = await raw.parse()
        except _FAILURES as exc:
            raise map_error(exc, self.provider) from None
        return collect_events(_events(message, raw.headers.get("request-id")))

    async def count_tokens(self, request: ChatRequest, *, limits: CallLimits | None = None) -> int:
        # What shapes the prompt; no breakpoints of our own, which do not change the count.
        params = convert(request, self.model, prompt_caching=False)
        fields = ("model", "messages", "system", "tools", "tool_choice", "output_config")
        try:
            counted = await self.first_byte(
                self._client.messages.count_tokens(
                    **{k: params[k] for k in fields if k in params}, **self.call_timeout(limits)
                ),
                limits,
            )
        except _FAILURES as exc:
            raise map_error(exc, self.provider) from None
        return int(counted.input_tokens)

    async def aclose(self) -> None:
        await self._client.close()


def _events(message: AnthropicMessage, request_id: str | None) -> Iterator[StreamEvent]:
    index = 0
    for block in message.content:
        if block.type == "text":
            yield TextDelta(text=block.text)
        elif block.type == "tool_use":
            arguments = json.dumps(block.input, separators=(",", ":"))
            yield ToolCallDelta(
                index=index, id=block.id, name=block.name, arguments_delta=arguments
            )
            index += 1
    usage = _Usage()
    usage.update(getattr(message, "usage", None))
    event = usage.event()
    if event is not None:
        yield event
    yield Finish(
        reason=_STOP.get(message.stop_reason or "", FinishReason.OTHER),
        provider_request_id=request_id,
        response_id=message.id,
        response_model=message.model,
    )
