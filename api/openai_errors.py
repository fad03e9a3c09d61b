"""OpenAI's error member: a problem+json body with `error` ({message, type, param, code})
alongside, which the openai SDK reads (`body.get("error", body)`) for the exception's `type`,
`code` and `param`. The Responses surface sends it as its envelope; Chat Completions, embeddings
and models keep problem+json's content type with the member added."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from api.problems import PROBLEM_JSON, no_retry


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


def error_envelope(status: int, problem: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """A problem+json body with OpenAI's `error` member added (what the SDK reads): the field
    at fault as `param`. The problem's own members stay."""
    errors = [e for e in problem.get("errors", []) if isinstance(e, dict)]
    field = errors[0]["field"] if errors else problem.get("field")
    param = field.removeprefix("body.") if isinstance(field, str) else None
    message = str(problem.get("detail") or problem.get("title") or "error")
    if errors:
        details = "; ".join(f"{e['field']}: {e['message']}" for e in errors)
        message = f"{message} ({details})"
    kind = _OPENAI_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    error = problem.get("error") or {"message": message, "type": kind, "code": kind}
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
