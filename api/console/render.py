"""Rendering console pages: the Jinja2 environment (autoescaped), the context every page gets,
and the response headers that keep the pages from being framed, cached or scripted from
elsewhere."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from api.console.session import CSRF_FIELD, Operator
from domain.amounts import decimal_text

HERE = Path(__file__).parent
templates = Jinja2Templates(directory=HERE / "templates")


def usd(value: object) -> str:
    """A cost in fixed-point dollars to the receipt's eight places, trailing zeros trimmed to
    two: a Decimal's own text was `0E-8` and `1.2E-7`, and the Overview's '%.6f' showed a day
    of small calls as 0.000000. None is a dash."""
    if value is None:
        return "—"
    amount = Decimal(str(value)).quantize(Decimal("0.00000001"))
    whole, _, places = decimal_text(amount).partition(".")
    return f"{whole}.{places.rstrip('0').ljust(2, '0')}"


templates.env.filters["usd"] = usd


def ago(at: datetime) -> str:
    """How long ago, in the largest whole unit: `12 s`, `5 min`, `3 h`, `2 d`."""
    seconds = max(0, int((datetime.now(UTC) - at).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit} ago"
    return f"{seconds} s ago"


templates.env.filters["ago"] = ago

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
