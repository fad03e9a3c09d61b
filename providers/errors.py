"""One classification of provider failures, made once at the adapter boundary.

The router only asks two questions of a failure: may it retry (and when), and what to write on
the receipt. Provider error *messages* are kept because they explain the failure without being
content; raw bodies are not, because validation errors of some servers echo the input back.
"""

from __future__ import annotations

import email.utils
import math
import re
import time
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

import aiohttp
import httpx
import httpx2

from domain.text import as_text


class ErrorKind(StrEnum):
    # transient: the same request may succeed later
    CONNECTION = "connection"
    TIMEOUT = "timeout"
    RATE_LIMIT = "rate_limit"
    SERVER = "server_error"
    OVERLOADED = "overloaded"
    STREAM_INCOMPLETE = "stream_incomplete"
    # non-retryable: the same request will fail the same way
    CONTEXT_LENGTH = "context_length"
    CONTENT_POLICY = "content_policy"
    AUTH = "auth"
    QUOTA = "quota"
    NOT_FOUND = "not_found"
    INVALID_REQUEST = "invalid_request"
    UNSUPPORTED = "unsupported"

    @property
    def transient(self) -> bool:
        return self in _TRANSIENT


_TRANSIENT = frozenset(
    {
        ErrorKind.CONNECTION,
        ErrorKind.TIMEOUT,
        ErrorKind.RATE_LIMIT,
        ErrorKind.SERVER,
        ErrorKind.OVERLOADED,
        ErrorKind.STREAM_INCOMPLETE,
    }
)

_REASON_LIMIT = 300
# Keys as providers echo them back in a 401's words: OpenAI's and Anthropic's `sk-`, Groq's
# `gsk_`, Google's `AIza`, xAI's `xai-`, a bearer token, and `api_key=`/`token=` pairs.
_CREDENTIALS = re.compile(
    r"((?<![A-Za-z0-9])(?:sk-|gsk_|xai-|AIza)[A-Za-z0-9_*.-]{4,}"
    r"|(?i:bearer)\s+\S+|key[-_][A-Za-z0-9]{8,}"
    r"|(?<![A-Za-z0-9_])(?i:api[-_]?key|access[-_]?token|token|secret)\s*[=:]\s*['\"]?[^\s'\",;]{4,})"
)
# What a provider's message may quote of the request: a validation error's `input_value=…`
# (pydantic's words, which OpenAI-compatible servers such as vLLM pass on, with up to 50
# characters of the offending value: a message's text), and any longer quoted run (an
# apostrophe inside a word opens none). The reason goes to the receipt and its events, so it
# must carry no prompt. Field names, types, limits and counts, which an operator needs, stay.
_QUOTED = re.compile(
    r"input_value=(?:'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|\{[^}]*\}?|[^,\]\s]*)"
    r"|(?<!\w)'(?:[^'\\]|\\.){25,}'(?!\w)"
    r'|"(?:[^"\\]|\\.){25,}"'
)


class ProviderError(Exception):
    """A classified provider failure. Never chained to the SDK exception: that one holds the
    HTTP request, whose body is the prompt."""

    def __init__(
        self,
        kind: ErrorKind,
        *,
        provider: str,
        status_code: int | None = None,
        code: str | None = None,
        reason: str | None = None,
        retry_after: float | None = None,
        provider_request_id: str | None = None,
    ) -> None:
        self.kind = kind
        self.provider = provider
        self.status_code = status_code
        self.code = code
        self.reason = clean_reason(reason)
        self.retry_after = retry_after
        self.provider_request_id = provider_request_id
        super().__init__(self._describe())

    @property
    def transient(self) -> bool:
        return self.kind.transient

    def _describe(self) -> str:
        parts = [f"{self.provider}: {self.kind.value}"]
        if self.status_code is not None:
            parts.append(f"status {self.status_code}")
        if self.code:
            parts.append(f"code {self.code}")
        if self.retry_after is not None:
            parts.append(f"retry after {self.retry_after:g}s")
        text = ", ".join(parts)
        return f"{text}: {self.reason}" if self.reason else text

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only constructor: rebuild from attributes so the error survives pickling.
        return (_rebuild, (self.__dict__.copy(),))


def _rebuild(state: dict[str, Any]) -> ProviderError:
    return ProviderError(
        state["kind"],
        provider=state["provider"],
        status_code=state["status_code"],
        code=state["code"],
        reason=state["reason"],
        retry_after=state["retry_after"],
        provider_request_id=state["provider_request_id"],
    )


def clean_reason(reason: str | None) -> str | None:
    """A provider's message as the receipt's story and the caller's error tell it: one line,
    credentials and what it quotes of the request redacted, bounded, and text
    (domain/text.as_text: half a surrogate pair made the caller's error a 500 and failed the
    workflow's result)."""
    if not reason:
        return None
    text = _CREDENTIALS.sub("[redacted]", " ".join(as_text(str(reason)).split()))
    text = _QUOTED.sub(_unquoted, text)
    return text if len(text) <= _REASON_LIMIT else text[: _REASON_LIMIT - 1] + "…"


def _unquoted(found: re.Match[str]) -> str:
    quote = found.group(0)
    return "input_value=[request text]" if quote.startswith("input_value=") else "[quoted text]"


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """Retry-After-Ms (OpenAI), Retry-After in seconds, or Retry-After as an HTTP date. A value
    that names no time ("inf", "1e400", "nan", a word) is no Retry-After: the router's own
    backoff and cool-down apply. Taken as given, an infinite one made every later failure of
    the deployment a 500 (its wait could not be said in whole seconds) until it answered again
    (tests/test_failure_reporting.py)."""
    millis = _finite(headers.get("retry-after-ms"))
    if millis is not None:
        return max(0.0, millis / 1000)
    value = headers.get("retry-after")
    if not value:
        return None
    seconds = _finite(value)
    if seconds is not None:
        return max(0.0, seconds)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _finite(text: str | None) -> float | None:
    try:
        number = float(text) if text else None
    except ValueError:
        return None
    return number if number is not None and math.isfinite(number) else None


def error_field(body: object, *path: str) -> str | None:
    """A string at body[path…], tolerating the shapes providers and proxies really send."""
    node: object = body
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node if isinstance(node, str) else None


# llama.cpp says "the request exceeds the available context size" (exceed_context_size_error),
# TGI "`inputs` tokens + `max_new_tokens` must be <= …": read as invalid requests, an
# evaluation's long-context case failed the whole evaluation as a refusal. Anthropic, when the
# prompt fits but not with `max_tokens` on top, says "input length and `max_tokens` exceed
# context limit: 178959 + 64000 > 200000": read as an invalid request, it stopped the call
# where a larger window would have answered, and the caller never heard the context-length
# close agents compact on.
_CONTEXT_HINTS = (
    "context length",
    "context_length",
    "prompt is too long",
    "too many tokens",
    "context size",
    "exceed_context",
    "exceed context",
    "context limit",
    "max_new_tokens",
)
# Azure OpenAI's filter answers a 400 with code `content_filter` ("…triggering Azure OpenAI's
# content management policy"), OpenAI's reasoning models `invalid_prompt` ("…flagged as
# potentially violating our usage policy"): read as invalid requests, their close reason was
# wrong, and the receipt said zero tokens though Azure bills a prompt it filtered
# (domain/failures.py).
_POLICY_HINTS = (
    "content_policy",
    "content policy",
    "content filter",
    "content_filter",
    "content management policy",
    "usage policy",
    "invalid_prompt",
    "safety system",
)
# An account that cannot pay, as Anthropic says it: a 400 invalid_request_error "Your credit
# balance is too low to access the Anthropic API". Read as the caller's invalid request, it
# stopped the call where a healthy second deployment would have answered.
_QUOTA_HINTS = ("credit balance is too low",)
# A request larger than the deployment's whole tokens-per-minute limit: OpenAI's 429
# rate_limit_exceeded "Request too large for gpt-4o … on tokens per min (TPM): Limit 30000,
# Requested 36278. The input or output tokens must be reduced…" (Groq's is a 413 in the same
# words, "tokens per minute"). No wait makes it fit, so it is no rate limit: as one, each
# oversized request was tried three times and struck the deployment's breaker three times,
# opening it for every other call of the tenant. As the deployment's quota it is not retried,
# strikes nothing, and moves to the next candidate, whose limit may be larger. An ordinary
# TPM limit says "Rate limit reached for … Used …, Requested …" and stays a rate limit.
_TOO_LARGE_FOR_LIMIT = ("request too large", "tokens per min")


def too_large_for_limit(exc: ProviderError) -> bool:
    """A quota refusal of the request's size, not of the account (_TOO_LARGE_FOR_LIMIT): no
    deployment of that tier takes a request so large, as no window too small takes a prompt too
    long, so an evaluation's case that meets it is failed, not the run (as an account out of
    credit ends it)."""
    text = (exc.reason or "").lower()
    return exc.kind is ErrorKind.QUOTA and all(hint in text for hint in _TOO_LARGE_FOR_LIMIT)


def kind_from_status(status: int, code: str | None, message: str | None) -> ErrorKind:
    """Status-code classification shared by every HTTP provider, refined by code and message."""
    code_l = (code or "").lower()
    text = f"{code_l} {(message or '').lower()}"
    if 300 <= status < 400:
        # A redirect, not followed (providers/openai_adapter.py): the endpoint is not where the
        # deployment says, a permanent fault on the provider's side, not the caller's request.
        return ErrorKind.NOT_FOUND
    if status in (413, 429) and all(hint in text for hint in _TOO_LARGE_FOR_LIMIT):
        return ErrorKind.QUOTA
    if status == 429:
        return ErrorKind.QUOTA if code_l == "insufficient_quota" else ErrorKind.RATE_LIMIT
    if status in (401, 403):
        return ErrorKind.AUTH
    if status == 402:
        return ErrorKind.QUOTA
    if status == 404:
        return ErrorKind.NOT_FOUND
    if status == 408:
        return ErrorKind.TIMEOUT
    if status == 529:
        return ErrorKind.OVERLOADED
    if status >= 500 or status == 409:
        return ErrorKind.OVERLOADED if "overloaded" in text else ErrorKind.SERVER
    if any(hint in text for hint in _QUOTA_HINTS):
        return ErrorKind.QUOTA
    if any(hint in text for hint in _CONTEXT_HINTS):
        return ErrorKind.CONTEXT_LENGTH
    if any(hint in text for hint in _POLICY_HINTS):
        return ErrorKind.CONTENT_POLICY
    return ErrorKind.INVALID_REQUEST


def aiohttp_failure(exc: BaseException, *, provider: str) -> ProviderError | None:
    """A failure of the SDKs' aiohttp transport (providers/transport.py), classified by the
    aiohttp exception at the root of the chain rather than by what the SDK wrapped it in: the
    openai SDK's vendored transport maps every aiohttp connection error (a refused connection,
    a server that hung up) to httpx2.ConnectTimeout, which the SDK then calls a timeout.
    Its timeouts are TimeoutError subclasses; everything else it raises (a reset, a cut body, a
    garbled status line) is the connection's failure, as httpx2's own transport errors are."""
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, aiohttp.ClientError):
        cause = cause.__cause__
    if cause is None:
        return None
    if isinstance(cause, TimeoutError):
        return ProviderError(ErrorKind.TIMEOUT, provider=provider, reason="timed out")
    return ProviderError(ErrorKind.CONNECTION, provider=provider, reason="connection error")


def transport_error(exc: Exception, *, provider: str) -> ProviderError | None:
    """Transport failures that reach us unwrapped: the Anthropic SDK lets read errors inside a
    stream through as httpx2 exceptions (aiohttp's under them, `aiohttp_failure`), and the
    rerank adapter uses httpx directly."""
    mapped = aiohttp_failure(exc, provider=provider)
    if mapped is not None:
        return mapped
    if isinstance(exc, httpx2.TimeoutException | httpx.TimeoutException):
        return ProviderError(ErrorKind.TIMEOUT, provider=provider, reason="timed out")
    if isinstance(exc, httpx2.TransportError | httpx.TransportError):
        return ProviderError(ErrorKind.CONNECTION, provider=provider, reason=type(exc).__name__)
    return None


class MalformedAnswer(ValueError):
    """What is wrong with a provider's answer, in our own words (never the answer's content)."""


# What reading a provider's answer raises when the answer is not what its protocol says.
UNREADABLE = (ValueError, TypeError, KeyError, AttributeError)


def malformed_answer(
    provider: str, what: str, exc: BaseException, request_id: str | None
) -> ProviderError:
    """An answer the protocol does not allow (a vector missing or not finite, a body that is not
    JSON): the provider's failure, transient as a server error is (retried, failed over), never
    the gateway's own nor a wrong answer passed on. Only our own words say what is wrong: a
    parser's or a validator's message may quote the answer."""
    detail = str(exc) if isinstance(exc, MalformedAnswer) else "it could not be read"
    return ProviderError(
        ErrorKind.SERVER,
        provider=provider,
        reason=f"the {what} response is malformed: {detail}",
        provider_request_id=request_id,
    )


def stream_incomplete(provider: str, request_id: str | None) -> ProviderError:
    return ProviderError(
        ErrorKind.STREAM_INCOMPLETE,
        provider=provider,
        reason="the stream ended before the provider signalled the end of the answer",
        provider_request_id=request_id,
    )


def mid_stream(error: ProviderError, request_id: str | None) -> ProviderError:
    """A failure while reading a stream the provider had accepted (its headers, with the
    request id, are in). A dropped connection there is a cut stream, not a failure to connect,
    so the caller and the receipt say stream_incomplete; and the request id goes with every
    such failure, so the reconciler can settle the receipt exactly."""
    cut = error.kind is ErrorKind.CONNECTION
    return ProviderError(
        ErrorKind.STREAM_INCOMPLETE if cut else error.kind,
        provider=error.provider,
        status_code=error.status_code,
        code=error.code,
        reason=f"the connection dropped mid-stream ({error.reason})" if cut else error.reason,
        retry_after=error.retry_after,
        provider_request_id=error.provider_request_id or request_id,
    )
