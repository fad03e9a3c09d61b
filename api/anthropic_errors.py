"""Anthropic's error envelope: a problem+json body as the anthropic SDK reads an error
(`{"type": "error", "error": {"type", "message"}}`), the problem's own members alongside, and
the `x-should-retry` header where a retry cannot help."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from api.problems import no_retry


class _Loose(BaseModel):
    model_config = ConfigDict(extra="allow")


class ErrorObject(_Loose):
    type: str
    message: str


class ErrorEnvelope(_Loose):
    """Anthropic's error body; the problem's own members (errors[].field, receiptId,
    errorClass, requestId) come alongside."""

    type: Literal["error"]
    error: ErrorObject


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
    body = {"type": "error", "error": {"type": kind, "message": message}, **extra}
    return body, no_retry(status, problem)
