"""OpenAI chat completions through the official SDK; also serves OpenAI-compatible servers
(vLLM, Ollama, llama.cpp server, the local upstream) through their base URL."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, Sequence
from typing import Any, Literal, cast
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import httpx2
import openai

from providers import log_guard
from providers.base import ProviderAdapter
from providers.completion_fold import collect_events
from providers.errors import (
    UNREADABLE,
    ErrorKind,
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
from providers.openai_answer import (
    completion_events,
    embedding_vectors,
    finish_reason,
    usage_from,
)
from providers.openai_request import chat_body
from providers.secrets import Connection
from providers.sse import sse_data
from providers.stream_tail import read_tail_then_close
from providers.tool_call_fragments import CallNumbering
from providers.transport import DEFAULT_TRANSPORT, HttpTransport, keeping_idle, resending
from providers.types import (
    KEEP_ALIVE,
    Accepted,
    CallLimits,
    ChatRequest,
    Completion,
    EmbeddingResult,
    Finish,
    ProviderTimeouts,
    RefusalDelta,
    StreamEvent,
    TextDelta,
    UsageEvent,
)
from providers.usage_figures import count

OPENAI_BASE_URL = "https://api.openai.com/v1"
# What the SDK and its transport raise; anything else is a bug of ours and must surface as one.
_FAILURES = (openai.OpenAIError, httpx2.HTTPError, aiohttp.ClientError, OSError)


def api_base_url(base_url: str | None) -> str:
    """A bare host (http://vllm:8000) gets /v1, the prefix every compatible server uses;
    a URL with a path is taken as given."""
    if not base_url:
        return OPENAI_BASE_URL
    parts = urlsplit(base_url)
    if parts.path in ("", "/"):
        return urlunsplit(parts._replace(path="/v1"))
    return base_url.rstrip("/")


def map_error(exc: Exception, provider: str) -> ProviderError:
    mapped = aiohttp_failure(exc, provider=provider)
    if mapped is not None:
        return mapped
    if isinstance(exc, openai.APITimeoutError):
        return ProviderError(ErrorKind.TIMEOUT, provider=provider, reason="timed out")
    if isinstance(exc, openai.APIConnectionError):
        return ProviderError(ErrorKind.CONNECTION, provider=provider, reason="connection error")
    if isinstance(exc, openai.APIStatusError):
        message = error_field(exc.body, "message") or error_field(exc.body, "error", "message")
        code = exc.code or error_field(exc.body, "type")
        return ProviderError(
            kind_from_status(exc.status_code, code, message),
            provider=provider,
            status_code=exc.status_code,
            code=exc.code,
            reason=message,
            retry_after=retry_after_seconds(exc.response.headers),
            provider_request_id=exc.request_id,
        )
    if isinstance(exc, openai.APIError):
        # An error event inside a stream: no status of its own, classify by its fields. vLLM
        # and LiteLLM put the HTTP status they would have answered with in `code` (500, "429";
        # the SDK makes it text): read as a 400, a rate limit or a crash of theirs before any
        # text stopped the call as the caller's invalid request instead of retrying it.
        code = exc.code or exc.type
        message = error_field(exc.body, "message")
        if code and len(code) == 3 and code.isascii() and code.isdigit() and "400" <= code < "600":
            status = int(code)
        else:
            status = 429 if code == "rate_limit_exceeded" else 400
        kind = kind_from_status(status, code, message)
        if kind is ErrorKind.INVALID_REQUEST and code in (None, "server_error", "internal_error"):
            kind = ErrorKind.SERVER
        return ProviderError(kind, provider=provider, code=exc.code, reason=message)
    mapped = transport_error(exc, provider=provider)
    if mapped is not None:
        return mapped
    return ProviderError(ErrorKind.SERVER, provider=provider, reason=type(exc).__name__)


FINISH_GRACE_SECONDS = 2.0


class OpenAIAdapter(ProviderAdapter):
    def __init__(
        self,
        *,
        model: str,
        connection: Connection,
        timeouts: ProviderTimeouts,
        provider: str = "openai",
        max_tokens_param: Literal["max_tokens", "max_completion_tokens"] | None = None,
        transport: HttpTransport = DEFAULT_TRANSPORT,
    ) -> None:
        log_guard.install()
        self.provider = provider
        self.model = model
        # OpenAI itself wants max_completion_tokens; compatible servers reliably know max_tokens.
        self._max_tokens_param = max_tokens_param or (
            "max_completion_tokens" if provider == "openai" else "max_tokens"
        )
        self.timeouts, self.timeout_type = timeouts, openai.Timeout
        timeout = timeouts.as_timeout(openai.Timeout)
        limits = keeping_idle(openai.DEFAULT_CONNECTION_LIMITS, timeouts.keepalive)
        self._client = openai.AsyncOpenAI(
            api_key=connection.api_key.get_secret_value(),
            base_url=api_base_url(connection.base_url),
            timeout=timeout,
            max_retries=0,
            # Redirects are not followed (the SDK's client would): a 307 from a hostile or
            # moved endpoint re-sent the prompt to wherever it named, an internal address or
            # the cloud's metadata service, and its error's words came back to the caller.
            http_client=resending(
                openai.DefaultAioHttpClient(timeout=timeout, limits=limits, follow_redirects=False)
                if transport == "aiohttp"
                else openai.DefaultAsyncHttpxClient(
                    timeout=timeout, limits=limits, follow_redirects=False
                )
            ),
        )

    def _params(self, request: ChatRequest) -> dict[str, Any]:
        return chat_body(request, self.model, self._max_tokens_param)

    async def _send(self, body: dict[str, Any], limits: CallLimits | None) -> httpx2.Response:
        """POST /chat/completions through the SDK's client (auth, base URL, headers, status
        errors as ever), its raw response unread. The body is built from our own types
        (providers/openai_request.py), so the SDK's typed `create` would only walk it again
        against its TypedDicts; the generic `post` sends it as it is. Per streamed one-message
        answer, 1.06 -> 0.81 CPU ms at c=1 and 0.99 -> 0.72 at c=16 (aiohttp transport,
        bench/bench_provider_transport.py, two runs of each, 2026-12-01), more with every
        message the request carries."""
        return await self._client.post(
            "/chat/completions",
            cast_to=httpx2.Response,
            body=body,
            options=cast(Any, self.call_timeout(limits)),
            stream=True,
            stream_cls=None,
        )

    async def stream(
        self, request: ChatRequest, *, limits: CallLimits | None = None
    ) -> AsyncGenerator[StreamEvent, None]:
        """The SDK sends the request and hands over its raw response; the server-sent events
        are read by the lean reader (providers/sse.py), as plain dicts."""
        params = self._params(request)
        params["stream"] = True
        params["stream_options"] = {"include_usage": True}
        try:
            http = await self.first_byte(self._send(params, limits), limits)
        except _FAILURES as exc:
            raise map_error(exc, self.provider) from None
        request_id = http.headers.get("x-request-id")
        response_id: str | None = None
        response_model: str | None = None
        usage: UsageEvent | None = None
        finish: str | None = None
        calls = CallNumbering()  # providers/tool_call_fragments.py
        refused = False
        saw_tools = False
        # Once the finish reason is in, only the usage chunk is still due: a server that never
        # sends it, or never closes after [DONE] (or only keeps alive), must not hold a
        # complete answer past this.
        grace_ends: float | None = None
        events = sse_data(http.aiter_bytes())
        answered = False  # the answer is whole: the stream's tail is read off its path
        try:
            yield Accepted(provider_request_id=request_id)
            while True:
                try:
                    if finish is None:
                        data = await anext(events)
                    else:
                        if grace_ends is None:
                            grace_ends = asyncio.get_running_loop().time() + FINISH_GRACE_SECONDS
                        async with asyncio.timeout_at(grace_ends):
                            data = await anext(events)
                except (StopAsyncIteration, TimeoutError):
                    break
                if data is None:
                    if finish is None:
                        yield KEEP_ALIVE
                    continue
                if data.startswith(b"[DONE]"):
                    break
                chunk = json.loads(data)
                if chunk.get("error"):
                    raise openai.APIError(
                        "the stream carried an error", http.request, body=chunk["error"]
                    )
                response_id = response_id or chunk.get("id")
                response_model = response_model or chunk.get("model")
                usage = usage_from(chunk.get("usage")) or usage
                for choice in chunk.get("choices") or ():
                    if choice.get("index", 0) != 0:
                        continue
                    delta = choice.get("delta") or {}
                    content = delta.get("content")
                    if content:
                        yield TextDelta(text=content)
                    refusal = delta.get("refusal")
                    if refusal:  # its words, ended as filtered (openai_answer.finish_reason)
                        refused = True
                        yield RefusalDelta(text=refusal)
                    for call in delta.get("tool_calls") or ():
                        saw_tools = True
                        yield calls.delta(call)
                    finish = choice.get("finish_reason") or finish
                if finish is not None and usage is not None:
                    break
            answered = finish is not None
        except _FAILURES as exc:
            raise mid_stream(map_error(exc, self.provider), request_id) from None
        finally:
            if answered:
                read_tail_then_close(events, http.aclose)
            else:
                with contextlib.suppress(Exception):
                    await http.aclose()
        if finish is None:
            raise stream_incomplete(self.provider, request_id)
        if usage is not None:
            yield usage
        yield Finish(
            reason=finish_reason(finish, saw_tools, refused),
            provider_request_id=request_id,
            response_id=response_id,
            response_model=response_model,
        )

    async def complete(
        self, request: ChatRequest, *, limits: CallLimits | None = None
    ) -> Completion:
        try:
            raw = await self.first_byte(
                self._client.chat.completions.with_raw_response.create(
                    **self._params(request), **self.call_timeout(limits)
                ),
                limits,
            )
            completion = raw.parse()
        except _FAILURES as exc:
            raise map_error(exc, self.provider) from None
        request_id = raw.headers.get("x-request-id")
        try:
            return collect_events(completion_events(completion, request_id, self.provider))
        except UNREADABLE as exc:
            # The SDK does not validate what it parses: content as a list of parts, arguments
            # as an object. The ValidationError quoted them, and evaluations and probes, which
            # read answers whole here, took that message into their histories, spans and the
            # evaluation's stored reason (the invoke path reads streams: resilience.py).
            raise malformed_answer(self.provider, "chat", exc, request_id) from None

    async def embed(
        self,
        inputs: Sequence[str],
        *,
        dimensions: int | None = None,
        limits: CallLimits | None = None,
    ) -> EmbeddingResult:
        extra: dict[str, Any] = {"dimensions": dimensions} if dimensions else {}
        try:
            raw = await self.first_byte(
                self._client.embeddings.with_raw_response.create(
                    model=self.model, input=list(inputs), **extra, **self.call_timeout(limits)
                ),
                limits,
            )
        except _FAILURES as exc:
            raise map_error(exc, self.provider) from None
        request_id = raw.headers.get("x-request-id")
        try:
            result = raw.parse()
            vectors = embedding_vectors(result.data, len(inputs))
        except _FAILURES as exc:
            raise map_error(exc, self.provider) from None
        except UNREADABLE as exc:
            raise malformed_answer(self.provider, "embeddings", exc, request_id) from None
        usage = getattr(result, "usage", None)
        return EmbeddingResult(
            vectors=vectors,
            input_tokens=count(getattr(usage, "prompt_tokens", None)),
            provider_request_id=request_id,
        )

    async def aclose(self) -> None:
        await self._client.close()
