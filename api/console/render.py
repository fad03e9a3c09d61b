"""Rendering console pages: the Jinja2 environment (autoescaped), the context every page gets,
and the response headers that keep the pages from being framed, cached or scripted from
elsewhere."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from api.console.session import CSRF_FIELD, Operator

HERE = Path(__file__).parent
templates = Jinja2Templates(directory=HERE / "templates")

# No inline script or style anywhere: the pages load only their own static files.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}

NAV = (
    ("board", "Deployments", "/console"),
    ("profiles", "Profiles", "/console/profiles"),
    ("preview", "Route preview", "/console/preview"),
    ("receipts", "Receipts", "/console/receipts"),
    ("overview", "Overview", "/console/overview"),
    ("schedules", "Schedules", "/console/schedules"),
)


def page(
    request: Request,
    template: str,
    operator: Operator | None,
    *,
    title: str,
    nav: str = "",
    status: int = 200,
    **context: Any,
) -> HTMLResponse:
    response = templates.TemplateResponse(
        request,
        template,
        {
            "title": title,
            "nav": nav,
            "nav_items": NAV,
            "operator": operator,
            "csrf_field": CSRF_FIELD,
            **context,
        },
        status_code=status,
    )
    response.headers.update(SECURITY_HEADERS)
    return response
