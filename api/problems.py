"""RFC 9457 problem details for every error, naming the offending field where there is one."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from domain.failures import STORE_RETRY_AFTER_SECONDS
from store.outage import OUTAGE_KINDS, is_outage

log = logging.getLogger("model_router.api")

PROBLEM_JSON = "application/problem+json"
_TITLES = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    422: "Unprocessable Content",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


# A surface whose SDK parses its own error envelope (Anthropic's Messages, OpenAI's Responses)
# renders the problem body its way: path prefix -> (status, problem) -> (body, extra headers).
Envelope = Callable[[int, dict[str, Any]], tuple[dict[str, Any], dict[str, str]]]


class Problem(Exception):
    """Raise from a route to answer with problem+json."""

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        type_: str = "about:blank",
        title: str | None = None,
        headers: dict[str, str] | None = None,
        **extensions: Any,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.type = type_
        self.title = title or _TITLES.get(status, "Error")
        self.headers = headers or {}
        self.extensions = extensions


# A stored row (a deployment, a profile version) this version cannot read: written before a rule
# was tightened, or by hand. One type wherever it is refused, so that a client matches it once.
UNREADABLE_TYPE = "https://model-router.dev/problems/stored-record-unreadable"


def problem_response(
    request: Request,
    status: int,
    detail: str,
    *,
    type_: str = "about:blank",
    title: str | None = None,
    headers: dict[str, str] | None = None,
    **extensions: Any,
) -> JSONResponse:
    render = envelope_for(request.app, request.url.path)
    if render is not None and status == 422:
        # The SDK surfaces answer a request they cannot take as OpenAI and Anthropic do: 400,
        # which both SDKs raise as BadRequestError. As 422 it was UnprocessableEntityError,
        # past a runtime's `except BadRequestError`.
        status = 400
        if title in (None, _TITLES[422]):
            title = _TITLES[400]
    body: dict[str, Any] = {
        "type": type_,
        "title": title or _TITLES.get(status, "Error"),
        "status": status,
        "detail": detail,
        "instance": request.url.path,
    }
    request_id = getattr(request.state, "request_id", None)
    if request_id:
        body["requestId"] = request_id
    body.update(extensions)
    if render is not None:
        body, more = render(status, body)
        # The status the envelope gives the failure's kind (OpenAI's 429 for a rate limit,
        # Anthropic's 529 for an overload: api/openai_errors.py, anthropic_errors.py).
        told = body.get("status")
        status = told if isinstance(told, int) else status
        return JSONResponse(body, status_code=status, headers={**(headers or {}), **more})
    # Paths with no envelope of their own (the factory API, the gateway): plain problem+json.
    headers = {**(headers or {}), **no_retry(status, body)}
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def no_retry(status: int, problem: dict[str, Any]) -> dict[str, str]:
    """Both SDKs retry 409 (as a lock timeout) and every 5xx unless told otherwise: a reused
    Idempotency-Key or a permanent failure will not change on a retry, and each retry without a
    key would be a new invocation with its own provider call."""
    if status == 409 or problem.get("errorClass") == "permanent":
        return {"x-should-retry": "false"}
    return {}


def envelope_for(app: Any, path: str) -> Envelope | None:
    """The error envelope of the surface serving this path, if it has its own."""
    envelopes: Mapping[str, Envelope] = getattr(getattr(app, "state", None), "error_envelopes", {})
    return next((r for prefix, r in envelopes.items() if path.startswith(prefix)), None)


VALIDATION = "https://model-router.dev/problems/validation"


def field_refused(field: str, message: str, detail: str) -> Problem:
    """A 422 naming the one field a route's own check refused (beyond what its model
    validates), in the shape the request's validation answers with."""
    return Problem(422, detail, type_=VALIDATION, errors=[{"field": field, "message": message}])


def body_refused(loc: tuple[str | int, ...], message: str) -> RequestValidationError:
    """A field of the body a surface's mapping refuses (what its model took but the normalised
    request cannot carry): the request's own validation error, naming `body.<loc>`, never the
    value given."""
    return RequestValidationError(
        [{"type": "value_error", "loc": ("body", *loc), "msg": message, "input": None}]
    )


def invalid_body(exc: ValidationError, *loc: str) -> RequestValidationError:
    """A part of the body validated in the route (not by FastAPI) refused as the request's own
    validation refuses: a 422 naming each field under `body.<loc>`, never with the value
    given (pydantic's message quotes it), which may be anything the caller typed."""
    return RequestValidationError(
        [
            {"type": err["type"], "loc": ("body", *loc, *err["loc"]), "msg": err["msg"]}
            for err in exc.errors(include_input=False, include_url=False)
        ]
    )


def _field(loc: tuple[Any, ...] | list[Any]) -> str:
    return ".".join(str(part) for part in loc)


def _validation_errors(exc: RequestValidationError) -> list[dict[str, str]]:
    out = []
    for err in exc.errors():
        loc = tuple(err.get("loc", ()))
        # A JSON syntax error reports a character offset as its "field"; the field is the body.
        if err.get("type") == "json_invalid":
            loc = loc[:1] or ("body",)
        out.append({"field": _field(loc), "message": str(err.get("msg", "invalid"))})
    return out


async def _on_problem(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, Problem)
    return problem_response(
        request,
        exc.status,
        exc.detail,
        type_=exc.type,
        title=exc.title,
        headers=exc.headers,
        **exc.extensions,
    )


async def _on_validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = _validation_errors(exc)
    malformed = any(e.get("type") == "json_invalid" for e in exc.errors())
    status = 400 if malformed else 422
    fields = ", ".join(dict.fromkeys(e["field"] for e in errors))
    detail = "Malformed JSON body" if malformed else f"Invalid request: {fields}"
    return problem_response(
        request,
        status,
        detail,
        type_=VALIDATION,
        errors=errors,
    )


async def _on_http(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    return problem_response(
        request,
        exc.status_code,
        str(exc.detail),
        headers=dict(exc.headers) if exc.headers else None,
    )


async def _on_store_down(request: Request, exc: Exception) -> JSONResponse:
    """The database is unreachable (an outage, a failover) or has no connection free within the
    pool's timeout: the caller may come back. Answered here rather than by the catch-all, which
    lets the server drop the connection after it."""
    # Our statement or our data at fault is a bug, not an outage; everything else the driver
    # raises (refused, shutting down, starting up, connection lost) is the store being away.
    if not is_outage(exc):
        return await on_unexpected(request, exc)
    log.warning(
        "store unreachable (%s) on %s %s", type(exc).__name__, request.method, request.url.path
    )
    return problem_response(
        request,
        503,
        "A store the gateway depends on is not reachable; retry after the indicated delay.",
        type_="https://model-router.dev/problems/store-unavailable",
        headers={"Retry-After": str(STORE_RETRY_AFTER_SECONDS)},
    )


def log_unhandled(request: Request, exc: Exception) -> None:
    """The one "unhandled error" line of a request. RequestIdMiddleware writes it in the
    request's log context (request id, tenant) and lets the exception go on; the outermost
    handler below, which Starlette runs outside every middleware, writes it only for an
    exception that never passed through there."""
    if getattr(request.state, "unhandled_logged", False):
        return
    request.state.unhandled_logged = True
    # Log the type only: exception messages can carry request content.
    log.error(
        "unhandled error %s on %s %s",
        type(exc).__name__,
        request.method,
        request.url.path,
    )


async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    """A 500 naming nothing of the exception: its message can carry request content."""
    log_unhandled(request, exc)
    return problem_response(request, 500, "An internal error occurred.")


def install(app: FastAPI) -> None:
    app.add_exception_handler(Problem, _on_problem)
    app.add_exception_handler(RequestValidationError, _on_validation)
    app.add_exception_handler(StarletteHTTPException, _on_http)
    for kind in OUTAGE_KINDS:
        app.add_exception_handler(kind, _on_store_down)
    # Starlette runs this one in ServerErrorMiddleware, outside every middleware: a 500 it sends
    # has no X-Request-Id or Server-Timing. RequestIdMiddleware answers first (api/middleware.py);
    # this stays for what fails outside it.
    app.add_exception_handler(Exception, on_unexpected)
