"""Anthropic messages through the official SDK, mapped to and from the normalised types."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator, Iterator
from typing import Any

import aiohttp
import anthropic
import httpx2
from anthropic.types import Message as AnthropicMessage

from domain.provider_reports import token_count
from providers import log_guard
from providers.anthropic_convert import convert
from providers.base import ProviderAdapter
from providers.completion_fold import collect_events
from providers.errors import (
    UNREADABLE,
    ErrorKind,
    MalformedAnswer,
    ProviderError,
    aiohttp_failure,
    error_field,
    kind_from_status,
    malformed_answer,
    mid_stream,
    retry_after_seconds,
    stream_incomplete,
    transport_error,
)
from providers.secrets import Connection
from providers.sse import sse_data
from providers.stream_tail import read_tail_then_close
from providers.transport import DEFAULT_TRANSPORT, HttpTransport, keeping_idle, resending
from providers.types import (
    KEEP_ALIVE,
    Accepted,
    CallLimits,
    ChatRequest,
    Completion,
    Finish,
    FinishReason,
    ProviderTimeouts,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
    UsageEvent,
)
from providers.usage_figures import counts

_FAILURES = (anthropic.AnthropicError, httpx2.HTTPError, aiohttp.ClientError, OSError)
CONTEXT_FULL = "model_context_window_exceeded"
_STOP = {
    "end_turn": FinishReason.STOP,
    "stop_sequence": FinishReason.STOP,
    "pause_turn": FinishReason.STOP,
    "max_tokens": FinishReason.LENGTH,
    "model_context_window_exceeded": FinishReason.LENGTH,
    "tool_use": FinishReason.TOOL_CALLS,
    "refusal": FinishReason.CONTENT_FILTER,
}
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
# The cause an error's `error.details.error_code` names (the SDK's `APIStatusError.error_code`),
# ahead of its type: a spend limit comes as a 429 rate_limit_error, and as a rate limit it was
# retried on the same deployment, which no wait would let through, and never fell back; an
# organization Anthropic put on hold comes as a 400 invalid_request_error, which blamed the
# caller and stopped the call. The 402s (linked_organization_*) are `billing_error`s already.
_ERROR_CODES = {
    "enforced_spend_limit_reached": ErrorKind.QUOTA,
    "contract_spend_limit_reached": ErrorKind.QUOTA,
    "linked_organization_spend_limit_reached": ErrorKind.QUOTA,
    "linked_organization_billing_unavailable": ErrorKind.QUOTA,
    "organization_on_hold": ErrorKind.AUTH,
}
# The SDK traces calls with OpenTelemetry; metadata only, whatever the environment asks for,
# because prompts and outputs never reach spans.
_TELEMETRY: Any = {"traces": {"content_mode": "metadata_only"}}


def _status_error(
    *,
    provider: str,
    status: int,
    error_type: str | None,
    error_code: str | None,
    message: str | None,
    headers: Any,
    request_id: str | None,
) -> ProviderError:
    # Errors inside a stream arrive with the stream's status, 200: the code, then the type,
    # decides.
    kind = _ERROR_CODES.get(error_code or "") or _ERROR_TYPES.get(error_type or "")
    if kind is None:
        kind = kind_from_status(status if status >= 300 else 500, error_type, message)
    return ProviderError(
        kind,
        provider=provider,
        status_code=status,
        code=error_code or error_type,
        reason=message,
        retry_after=retry_after_seconds(headers),
        provider_request_id=request_id,
    )


def map_error(exc: Exception, provider: str) -> ProviderError:
    mapped = aiohttp_failure(exc, provider=provider)
    if mapped is not None:
        return mapped
    if isinstance(exc, anthropic.APITimeoutError):
        return ProviderError(ErrorKind.TIMEOUT, provider=provider, reason="timed out")
    if isinstance(exc, anthropic.APIConnectionError):
        return ProviderError(ErrorKind.CONNECTION, provider=provider, reason="connection error")
    if isinstance(exc, anthropic.APIStatusError):
        return _status_error(
            provider=provider,
            status=exc.status_code,
            error_type=exc.type if isinstance(exc.type, str) else None,
            error_code=exc.error_code,
            message=exc.api_message,
            headers=exc.response.headers,
            request_id=exc.request_id,
        )
    mapped = transport_error(exc, provider=provider)
    if mapped is not None:
        return mapped
    return ProviderError(ErrorKind.SERVER, provider=provider, reason=type(exc).__name__)


def _stream_error(
    event: dict[str, Any], headers: Any, provider: str, request_id: str | None
) -> ProviderError:
    """An `error` event inside an accepted stream, mapped as the SDK's status error for it
    would be (status 200, the error's type decides)."""
    error = event.get("error")
    error = error if isinstance(error, dict) else {}
    error_type, message = error.get("type"), error.get("message")
    return mid_stream(
        _status_error(
            provider=provider,
            status=200,
            error_type=error_type if isinstance(error_type, str) else None,
            error_code=error_field(error, "details", "error_code"),
            message=message if isinstance(message, str) else None,
            headers=headers,
            request_id=request_id,
        ),
        request_id,
    )


class _Usage:
    """Anthropic splits usage between message_start and message_delta, and leaves cached
    tokens out of input_tokens; this adds them back so input_tokens counts the whole prompt."""

    def __init__(self) -> None:
        # The figures as sent, read as counts only once the report is complete (`event`).
        self.fresh: object = None
        self.output: object = None
        self.read: object = 0
        self.write: object = 0

    def update(self, usage: Any) -> None:
        """From a stream event's usage dict or the SDK's Usage object (a whole message)."""
        if usage is None:
            return
        get = usage.get if isinstance(usage, dict) else lambda name: getattr(usage, name, None)
        if get("input_tokens") is not None:
            self.fresh = get("input_tokens")
        if get("output_tokens") is not None:
            self.output = get("output_tokens")
        self.read = get("cache_read_input_tokens") or self.read
        self.write = get("cache_creation_input_tokens") or self.write

    def event(self) -> UsageEvent | None:
        """The report's usage event: none when it is incomplete, or when one of its figures
        states no count (providers/usage_figures.py)."""
        if self.fresh is None or self.output is None:
            return None
        found = counts(self.fresh, self.output, self.read, self.write)
        if found is None:
            return None
        fresh, output, read, write = found
        return UsageEvent(
            input_tokens=fresh + read + write,
            output_tokens=output,
            cached_input_tokens=read,
            cache_write_input_tokens=write,
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
        transport: HttpTransport = DEFAULT_TRANSPORT,
    ) -> None:
        log_guard.install()
        self.provider = provider
        self.model = model
        self._prompt_caching = prompt_caching
        self.timeouts, self.timeout_type = timeouts, anthropic.Timeout
        timeout = timeouts.as_timeout(anthropic.Timeout)
        limits = keeping_idle(anthropic.DEFAULT_CONNECTION_LIMITS, timeouts.keepalive)
        self._client = anthropic.AsyncAnthropic(
            api_key=connection.api_key.get_secret_value(),
            base_url=connection.base_url or "https://api.anthropic.com",
            timeout=timeout,
            max_retries=0,
            open_telemetry=_TELEMETRY,
            # Redirects are not followed (providers/openai_adapter.py says why).
            http_client=resending(
                anthropic.DefaultAioHttpClient(
                    timeout=timeout, limits=limits, follow_redirects=False
                )
                if transport == "aiohttp"
                else anthropic.DefaultAsyncHttpxClient(
                    timeout=timeout, limits=limits, follow_redirects=False
                )
            ),
        )

    async def stream(
        self, request: ChatRequest, *, limits: CallLimits | None = None
    ) -> AsyncGenerator[StreamEvent, None]:
        """The SDK sends the request and hands over its raw response; the server-sent events
        are read by the lean reader (providers/sse.py), as plain dicts, as the OpenAI adapter
        reads its own: the SDK's stream built a typed event object per chunk."""
        params = convert(request, self.model, prompt_caching=self._prompt_caching)
        manager = self._client.messages.with_streaming_response.create(
            **params, stream=True, **self.call_timeout(limits)
        )
        try:
            response = await self.first_byte(manager.__aenter__(), limits)
        except _FAILURES as exc:
            raise map_error(exc, self.provider) from None
        http = response.http_response
        request_id = http.headers.get("request-id")
        response_id: str | None = None
        response_model: str | None = None
        usage = _Usage()
        stop_reason: str | None = None
        stop_sequence: str | None = None
        tool_index: dict[int, int] = {}
        events = sse_data(http.aiter_bytes())
        answered = False  # the answer is whole: the stream's tail is read off its path
        try:
            yield Accepted(provider_request_id=request_id)
            async for data in events:
                if data is None:
                    yield KEEP_ALIVE
                    continue
                event = json.loads(data)
                kind = event.get("type")
                if kind == "content_block_delta":
                    delta = event.get("delta") or {}
                    delta_type = delta.get("type")
                    if delta_type == "text_delta":
                        yield TextDelta(text=delta.get("text") or "")
                    elif delta_type == "input_json_delta" and event.get("index") in tool_index:
                        yield ToolCallDelta(
                            index=tool_index[event["index"]],
                            arguments_delta=delta.get("partial_json") or "",
                        )
                elif kind == "message_start":
                    message = event.get("message") or {}
                    response_id = message.get("id")
                    response_model = message.get("model")
                    usage.update(message.get("usage"))
                elif kind == "content_block_start":
                    block = event.get("content_block") or {}
                    if block.get("type") == "tool_use":
                        tool_index[event.get("index", 0)] = len(tool_index)
                        yield ToolCallDelta(
                            index=tool_index[event.get("index", 0)],
                            id=block.get("id"),
                            name=block.get("name"),
                        )
                    elif block.get("type") == "text" and block.get("text"):
                        yield TextDelta(text=block["text"])
                elif kind == "message_delta":
                    delta = event.get("delta") or {}
                    stop_reason = delta.get("stop_reason") or stop_reason
                    stop_sequence = delta.get("stop_sequence") or stop_sequence
                    usage.update(event.get("usage"))
                    if stop_reason is not None:
                        # The answer and its usage are complete: a provider that never
                        # sends message_stop (or never closes) must not hold the call.
                        break
                elif kind == "ping":
                    yield KEEP_ALIVE
                elif kind == "error":
                    raise _stream_error(event, http.headers, self.provider, request_id)
            answered = stop_reason is not None
        except _FAILURES as exc:
            raise mid_stream(map_error(exc, self.provider), request_id) from None
        finally:
            if answered:
                read_tail_then_close(events, lambda: manager.__aexit__(None, None, None))
            else:
                with contextlib.suppress(Exception):
                    await manager.__aexit__(None, None, None)
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
            stop_sequence=stop_sequence if isinstance(stop_sequence, str) else None,
            context_full=stop_reason == CONTEXT_FULL,
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
        request_id = raw.headers.get("request-id")
        try:
            return collect_events(_events(message, request_id))
        except UNREADABLE as exc:  # as the OpenAI adapter's: never a message quoting the answer
            raise malformed_answer(self.provider, "messages", exc, request_id) from None

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
            found = token_count(getattr(counted, "input_tokens", None))
            if found is None or found < 0:
                raise MalformedAnswer("no whole input_tokens")
        except _FAILURES as exc:
            raise map_error(exc, self.provider) from None
        except UNREADABLE as exc:  # the caller gets our estimate (api/token_count.py)
            raise malformed_answer(self.provider, "token count", exc, None) from None
        return found

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
        stop_sequence=getattr(message, "stop_sequence", None),
        context_full=message.stop_reason == CONTEXT_FULL,
    )
