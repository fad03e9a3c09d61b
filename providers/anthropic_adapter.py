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
from providers.anthropic_errors import map_error, stream_error
from providers.anthropic_json_mode import answer_tool, read_answers, read_whole
from providers.base import ProviderAdapter
from providers.completion_fold import collect_events
from providers.errors import (
    UNREADABLE,
    MalformedAnswer,
    malformed_answer,
    mid_stream,
    stream_incomplete,
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
# The SDK traces calls with OpenTelemetry; metadata only, whatever the environment asks for,
# because prompts and outputs never reach spans.
_TELEMETRY: Any = {"traces": {"content_mode": "metadata_only"}}


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

    def stream(
        self, request: ChatRequest, *, limits: CallLimits | None = None
    ) -> AsyncGenerator[StreamEvent, None]:
        """`_stream`'s events; a JSON-mode answer tool's call read back as text, as `complete`
        reads a whole message's (providers/anthropic_json_mode.py)."""
        events = self._stream(request, limits)
        name = answer_tool(request)
        return events if name is None else read_answers(events, name)

    async def _stream(
        self, request: ChatRequest, limits: CallLimits | None
    ) -> AsyncGenerator[StreamEvent, None]:
        """The SDK sends the request and hands over its raw response; the server-sent events
        are read by the lean reader (providers/sse.py), as plain dicts, as the OpenAI adapter
        reads its own: the SDK's stream built a typed event object per chunk."""
        params = self._params(request, self._prompt_caching)
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
                    raise stream_error(event, http.headers, self.provider, request_id)
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
                    **self._params(request, self._prompt_caching),
                    **self.call_timeout(limits),
                ),
                limits,
            )
            message = await raw.parse()
        except _FAILURES as exc:
            raise map_error(exc, self.provider) from None
        request_id = raw.headers.get("request-id")
        try:
            events = read_whole(_events(message, request_id), answer_tool(request))
            return collect_events(events)
        except UNREADABLE as exc:  # as the OpenAI adapter's: never a message quoting the answer
            raise malformed_answer(self.provider, "messages", exc, request_id) from None

    async def count_tokens(self, request: ChatRequest, *, limits: CallLimits | None = None) -> int:
        # What shapes the prompt; no breakpoints of our own, which do not change the count.
        params = self._params(request, False)
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

    def _params(self, request: ChatRequest, prompt_caching: bool) -> dict[str, Any]:
        return convert(request, self.model, prompt_caching=prompt_caching, provider=self.provider)

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
