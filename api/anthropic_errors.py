"""Anthropic's error envelope: a problem+json body as the anthropic SDK reads an error
(`{"type": "error", "error": {"type", "message"}, "request_id"}`), the problem's own members
alongside, and the `x-should-retry` header where a retry cannot help. A failed call's kind is
answered with Anthropic's status and type for it (429 `rate_limit_error`, 529
`overloaded_error`, …), whole and mid-stream alike."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from api.problems import no_retry


class _Loose(BaseModel):
    model_config = ConfigDict(extra="allow")


class ErrorObject(_Loose):
    type: str
    message: str


class ErrorEnvelope(_Loose):
    """Anthropic's error body, with its `request_id` (the `request-id` header's); the
    problem's own members (errors[].field, receiptId, errorClass, requestId) come alongside."""

    type: Literal["error"]
    error: ErrorObject
    request_id: str | None = None


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorEnvelope, "description": "Anthropic's error envelope"}
    for code in (400, "4XX", "5XX")
}


# The gateway's statuses as Anthropic's error types (what the SDK reads as `error.type`).
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    413: "request_too_large",
    422: "invalid_request_error",
    429: "rate_limit_error",
    502: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
}

# A failed call's kind (the receipt's error kind) as Anthropic answers it, status and type: the
# gateway's own 503 for every transient kind read to the SDK as an overload whatever broke, so
# a rate limit was retried as one and code telling a RateLimitError apart never saw one. The
# one home for a whole answer (`error_envelope`) and a stream's `error` event
# (api/anthropic_stream.py). The gateway's own outages (`store_unavailable`,
# `temporal_unavailable`) keep its 503, as when they refuse a call before it is claimed.
FAILURES: dict[str, tuple[int, str]] = {
    "rate_limit": (429, "rate_limit_error"),
    "overloaded": (529, "overloaded_error"),
    "unavailable": (529, "overloaded_error"),  # no candidate may be called now
    "timeout": (504, "timeout_error"),
    "server_error": (500, "api_error"),
    "connection": (500, "api_error"),
    "stream_incomplete": (500, "api_error"),
    "content_policy": (400, "invalid_request_error"),
    "context_length": (400, "invalid_request_error"),
    "invalid_request": (400, "invalid_request_error"),
}


def failure_type(kind: str) -> str:
    """Anthropic's `error.type` for a failed call's kind."""
    return FAILURES.get(kind, (500, "api_error"))[1]


def _failure(status: int, problem: dict[str, Any]) -> tuple[int, str] | None:
    """Anthropic's status and type for a call that failed before any output, when the
    problem says its kind (api/wire.py `failure_response`: the kind in `error.type`); None for
    every other problem, answered by its status alone."""
    error = problem.get("error")
    kind = error.get("type") if isinstance(error, dict) else None
    if status < 500 or not isinstance(kind, str) or kind not in FAILURES:
        return None
    return FAILURES[kind]


def _title(status: int) -> str:
    return "Overloaded" if status == 529 else HTTPStatus(status).phrase


def error_envelope(status: int, problem: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """A problem+json body as Anthropic's error envelope; the problem's own members (the
    fields at fault, the receipt, the error class) stay alongside for callers that look."""
    message = str(problem.get("detail") or problem.get("title") or "error")
    fields = [e["field"] for e in problem.get("errors", []) if isinstance(e, dict)]
    if fields:
        details = "; ".join(f"{e['field']}: {e['message']}" for e in problem["errors"])
        message = f"{message} ({details})"
    elif problem.get("field"):
        message = f"{message} (field {problem['field']})"
    error = problem.get("error")
    reason = problem.get("reason")
    if isinstance(error, dict) and error.get("code") == "context_length_exceeded":
        # Anthropic's own words for it, which Claude Code-style clients look for to compact
        # the conversation and go on; the provider's reason follows.
        message = f"prompt is too long: {reason or message}"
    elif isinstance(reason, str) and reason:
        # The provider's own reason, where the SDK shows it (`error.message`): only in the
        # `reason` member beside it, a refused history read "The model call failed
        # (invalid_request)." and no more.
        message = f"{message} {reason}"
    kind = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    extra = {k: v for k, v in problem.items() if k not in ("type", "error")}
    failure = _failure(status, problem)
    if failure is not None:
        # The problem's `status` says what api/wire.failure_response then answers with.
        status, kind = failure
        extra.update(status=status, title=_title(status))
    body = {"type": "error", "error": {"type": kind, "message": message}, **extra}
    if problem.get("requestId"):
        body["request_id"] = problem["requestId"]  # where Anthropic's error body has it
    return body, no_retry(status, problem)
