"""The operator console: server-rendered pages under /console, served by the API process.

Pages call the same services and repositories as the REST routers (never the REST API over
HTTP) and hold none of their rules. `install(app)` adds the router, the static files and the
handlers that turn "not signed in" into the sign-in page and refusals into HTML pages; nothing
here is a middleware, so the API's other routes (the invoke path above all) run exactly as
without the console."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from api.console import (
    auth_pages,
    deployment_actions,
    deployments,
    overview,
    profiles,
    receipts,
    schedules,
)
from api.console.render import HERE, page
from api.console.session import PATH, ConsoleError, Operator, SignInRequired, signed_in
from store.outage import OUTAGE_KINDS, is_outage

Handler = Callable[[Request, Any], Response | Awaitable[Response]]
PageOf = Callable[[Exception], ConsoleError | None]

router = APIRouter(include_in_schema=False)
for module in (
    auth_pages,
    deployments,
    deployment_actions,
    profiles,
    receipts,
    overview,
    schedules,
):
    router.include_router(module.router, prefix=PATH)


async def _on_sign_in_required(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, SignInRequired)
    return auth_pages.sign_in_redirect(exc.next_path)


# Why the error page may have no operator to name: no session, or one that cannot be checked
# now (the issuer's key set out of reach, the 503 the page may be reporting; or the store
# away). Raised from the page, each was a 500 with no page at all; without an operator the
# page has no navigation, its message intact. Anything else is a bug of ours: it propagates,
# a 500 logged as one, not an anonymous error page.
_NO_OPERATOR: tuple[type[Exception], ...] = (SignInRequired, ConsoleError, *OUTAGE_KINDS)


async def _on_console_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ConsoleError)
    operator: Operator | None
    try:
        operator = await signed_in(request, request.app.state.runtime)
    except _NO_OPERATOR:
        operator = None
    return page(
        request,
        "error.html",
        operator,
        title={403: "Not allowed", 404: "Not found"}.get(exc.status, "Cannot do that"),
        status=exc.status,
        message=exc.message,
    )


def _on_console(page_of: PageOf, api_handler: Handler) -> Handler:
    """The API's handler for an exception, except under /console, where the operator gets a
    page (with the navigation, and the way back) instead of a problem+json body."""

    async def handler(request: Request, exc: Any) -> Response:
        path = request.url.path
        if path == PATH or path.startswith(f"{PATH}/"):
            refusal = page_of(exc)
            if refusal is not None:
                return await _on_console_error(request, refusal)
        answered = api_handler(request, exc)
        return await answered if inspect.isawaitable(answered) else answered

    return handler


def _invalid(exc: Exception) -> ConsoleError | None:
    assert isinstance(exc, RequestValidationError)
    fields = ", ".join(
        dict.fromkeys(".".join(str(p) for p in e.get("loc", ())[1:]) for e in exc.errors())
    )
    return ConsoleError(400, f"Not a value this page takes: {fields}.")


def _http(exc: Exception) -> ConsoleError | None:
    assert isinstance(exc, StarletteHTTPException)
    said = {404: "No such page.", 405: "This page is not for that: use the console's links."}
    return ConsoleError(exc.status_code, said.get(exc.status_code, str(exc.detail)))


def _store_down(exc: Exception) -> ConsoleError | None:
    if not is_outage(exc):
        return None  # a bug of ours: the API's handler logs it
    return ConsoleError(503, "The store cannot be reached right now; try again shortly.")


def install(app: FastAPI) -> None:
    app.include_router(router)
    app.mount(f"{PATH}/static", StaticFiles(directory=HERE / "static"), name="console-static")
    app.add_exception_handler(SignInRequired, _on_sign_in_required)
    app.add_exception_handler(ConsoleError, _on_console_error)
    # After api/problems.install: a bad query value, an unknown console path or the store away
    # answered the operator with problem+json, the page and what they typed gone.
    pages: tuple[tuple[type[Exception], PageOf], ...] = (
        (RequestValidationError, _invalid),
        (StarletteHTTPException, _http),
        *((kind, _store_down) for kind in OUTAGE_KINDS),
    )
    for kind, page_of in pages:
        app.add_exception_handler(kind, _on_console(page_of, app.exception_handlers[kind]))
