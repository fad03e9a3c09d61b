"""The operator console: server-rendered pages under /console, served by the API process.

Pages call the same services and repositories as the REST routers (never the REST API over
HTTP) and hold none of their rules. `install(app)` adds the router, the static files and the
handlers that turn "not signed in" into the sign-in page and refusals into HTML pages; nothing
here is a middleware, so the API's other routes (the invoke path above all) run exactly as
without the console."""

from __future__ import annotations

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import Response
from fastapi.staticfiles import StaticFiles

from api.console import (
    auth_pages,
    deployments,
    overview,
    profiles,
    receipts,
    schedules,
)
from api.console.render import HERE, page
from api.console.session import PATH, ConsoleError, Operator, SignInRequired, signed_in

router = APIRouter(include_in_schema=False)
for module in (auth_pages, deployments, profiles, receipts, overview, schedules):
    router.include_router(module.router, prefix=PATH)


async def _on_sign_in_required(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, SignInRequired)
    return auth_pages.sign_in_redirect(exc.next_path)


async def _on_console_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ConsoleError)
    operator: Operator | None
    try:
        operator = await signed_in(request, request.app.state.runtime)
    except SignInRequired:
        operator = None
    return page(
        request,
        "error.html",
        operator,
        title={403: "Not allowed", 404: "Not found"}.get(exc.status, "Cannot do that"),
        status=exc.status,
        message=exc.message,
    )


def install(app: FastAPI) -> None:
    app.include_router(router)
    app.mount(f"{PATH}/static", StaticFiles(directory=HERE / "static"), name="console-static")
    app.add_exception_handler(SignInRequired, _on_sign_in_required)
    app.add_exception_handler(ConsoleError, _on_console_error)
