"""One server span per HTTP request, continuing the caller's W3C trace when it sends one.

The span is current while the route runs, so the InvokeModel workflow it starts (and, through
Temporal's interceptor, the provider call) lands in the same trace. It carries the method, the
route template, the status and the request id: never a body, a query string or a header value
other than the trace context itself."""

from __future__ import annotations

from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.tracing import tracer


class TracingMiddleware:
    """Pure ASGI, like RequestIdMiddleware: a streamed answer ends the span when it ends."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        carrier = {
            k.decode("latin-1"): v.decode("latin-1")
            for k, v in scope.get("headers") or []
            if k in (b"traceparent", b"tracestate")
        }
        method = scope.get("method", "")
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        with tracer().start_as_current_span(
            method,
            context=propagate.extract(carrier) if carrier else None,
            kind=SpanKind.SERVER,
            attributes={"http.request.method": method, "url.scheme": scope.get("scheme", "http")},
            # An exception's message may quote what it choked on: only its type is kept.
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                await self.app(scope, receive, send_status)
            except BaseException as exc:
                span.set_attribute("error.type", type(exc).__name__)
                raise
            finally:
                _finish(span, scope, status)


def _finish(span: trace.Span, scope: Scope, status: int) -> None:
    if not span.is_recording():
        return
    route = getattr(scope.get("route"), "path", None)
    if route:
        # The template (/v1/receipts/{receipt_id}), not the path: low cardinality, no ids.
        span.update_name(f"{scope.get('method', '')} {route}")
        span.set_attribute("http.route", route)
    span.set_attribute("http.response.status_code", status)
    request_id = (scope.get("state") or {}).get("request_id")
    if request_id:
        span.set_attribute("model_router.request_id", request_id)
    if status >= 500:
        span.set_status(Status(StatusCode.ERROR))
