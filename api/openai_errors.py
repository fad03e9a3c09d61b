"""OpenAI's error member: a problem+json body with `error` ({message, type, param, code})
alongside, which the openai SDK reads (`body.get("error", body)`) for the exception's `type`,
`code` and `param`. The Responses surface sends it as its envelope; Chat Completions, embeddings
and models keep problem+json's content type with the member added."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from pydantic import BaseModel, ConfigDict

from api.problems import PROBLEM_JSON, no_retry
from domain.failures import TRANSIENT


class _Loose(BaseModel):
    model_config = ConfigDict(extra="allow")


class ErrorObject(_Loose):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorEnvelope(_Loose):
    """problem+json members with OpenAI's `error` (what the SDK reads) alongside."""

    error: ErrorObject


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorEnvelope, "description": "OpenAI's error envelope"}
    for code in (400, "4XX", "5XX")
}


_OPENAI_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    429: "rate_limit_error",
}


# A call that failed before any output with a transient kind (api/wire.py `failure_response`
# names it in `error.code`), as OpenAI answers its own: status, `error.type`, `error.code`. All
# were the gateway's 503 under its own names (`rate_limit` …): the SDK raised a rate limit as an
# InternalServerError, and code reading `code == "rate_limit_exceeded"` never saw one. OpenAI's
# 429 body is `{"type": "requests", "code": "rate_limit_exceeded"}` (providers/upstream speaks
# it); its 5xx are `server_error` with no code of their own, so the gateway's kind stays as the
# code. A timeout is the gateway's 504, as on Messages. Retry-After and x-should-retry are the
# failure's, whatever the status.
FAILURES: dict[str, tuple[int, str, str]] = {
    "rate_limit": (429, "requests", "rate_limit_exceeded"),
    "timeout": (504, "server_error", "timeout"),
}


# OpenAI's own names for a failure agents act on: a context overflow is what makes Codex and the
# Agents SDK compact the conversation and go on (they look for `context_length_exceeded`);
# under the gateway's name they stopped the session. Other kinds keep the gateway's name.
_NAMES = {"context_length": ("invalid_request_error", "context_length_exceeded")}


def openai_names(kind: str) -> tuple[str, str]:
    """A failed call's `error.type` and `error.code` before the envelope (`FAILURES` then
    renames a transient kind's, as `error_envelope` does)."""
    return _NAMES.get(kind, (kind, kind))


def _transient(kind: str) -> tuple[int, str, str]:
    """OpenAI's status, type and code for a transient `kind` (`FAILURES`, else a 503)."""
    return FAILURES.get(kind, (503, "server_error", kind))


def failure_names(kind: str) -> tuple[str, str]:
    """The `error.type` and `error.code` a whole response's error gives a failure of `kind`
    (`openai_names`, a transient kind's renamed as `error_envelope` renames it). A stream that
    fails after output began says the same (api/openai_stream.py, api/responses_stream.py):
    code matching on them saw another failure depending on when it struck."""
    if kind in TRANSIENT:
        _, error_type, code = _transient(kind)
        return error_type, code
    return openai_names(kind)


def failure_code(kind: str) -> str:
    """The `error.code` of `failure_names`."""
    return failure_names(kind)[1]


def _failure(problem: dict[str, Any]) -> tuple[int, str, str] | None:
    """OpenAI's status, type and code for a transient failure's problem; None for any other."""
    error = problem.get("error")
    kind = error.get("code") if isinstance(error, dict) else None
    if (
        problem.get("errorClass") != "transient"
        or not isinstance(kind, str)
        or kind not in TRANSIENT
    ):
        return None
    return _transient(kind)


def error_envelope(status: int, problem: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """A problem+json body with OpenAI's `error` member added (what the SDK reads): the field
    at fault as `param`. The problem's own members stay; a transient failure's `status` says
    OpenAI's for its kind (`FAILURES`), which api/wire.py then answers with."""
    errors = [e for e in problem.get("errors", []) if isinstance(e, dict)]
    field = errors[0]["field"] if errors else problem.get("field")
    param = field.removeprefix("body.") if isinstance(field, str) else None
    message = str(problem.get("detail") or problem.get("title") or "error")
    if errors:
        details = "; ".join(f"{e['field']}: {e['message']}" for e in errors)
        message = f"{message} ({details})"
    kind = _OPENAI_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    error = problem.get("error") or {"message": message, "type": kind, "code": kind}
    failure = _failure(problem)
    if failure is not None:
        status, kind, code = failure
        error = {**error, "type": kind, "code": code}
        problem = {**problem, "status": status, "title": HTTPStatus(status).phrase}
    if status == 404 and param == "model" and "error" not in problem:
        # OpenAI's own words for a model it does not serve, which clients look for.
        error.update(type="invalid_request_error", code="model_not_found")
    return {**problem, "error": {"param": param, **error}}, no_retry(status, problem)


def problem_with_error(
    status: int, problem: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, str]]:
    """The same member on a problem+json body that keeps its content type (Chat Completions,
    embeddings, models). Without it the SDK took the problem's own `type` (a URI) for the
    error's, with no `code` or `param`: `model_not_found` and the field at fault were lost."""
    body, headers = error_envelope(status, problem)
    return body, {**headers, "content-type": PROBLEM_JSON}
