"""Request ids: accepted from X-Request-Id when well-formed, generated otherwise, always echoed.

The same middleware opens the request's log context (request id, then tenant and receipt id as
they become known) and writes one access line per request: method, path, status, duration,
never a body or a query string (either can carry content).

It also answers an exception nothing below it handled: Starlette's own catch-all runs outside
every middleware, so its 500 went out without X-Request-Id or Server-Timing and its log line
without the request's context."""

from __future__ import annotations

import logging
import re
import time
import uuid

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api import problems
from core.logging import bind, request_context

HEADER = b"x-request-id"
# The header the anthropic SDKs read a request's id from (`_request_id`, `stream.request_id`).
ANTHROPIC_HEADER = b"request-id"
RECEIPT_HEADER = b"x-model-router-receipt-id"
_SAFE = re.compile(rb"^[A-Za-z0-9._:-]{1,128}$")

access_log = logging.getLogger("model_router.access")


class RequestIdMiddleware:
    """Pure ASGI (not BaseHTTPMiddleware) so streaming responses are not buffered."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = dict(scope.get("headers") or []).get(HEADER)
        request_id = incoming.decode() if incoming and _SAFE.match(incoming) else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id
        started = time.perf_counter()
        status = 500
        answering = False
        anthropic = str(scope.get("path", "")).startswith("/v1/messages")

        async def send_with_id(message: Message) -> None:
            nonlocal status, answering
            if message["type"] == "http.response.start":
                answering = True
                status = int(message["status"])
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != HEADER]
                headers.append((HEADER, request_id.encode()))
                if anthropic:
                    headers.append((ANTHROPIC_HEADER, request_id.encode()))
                message["headers"] = headers
                receipt = dict(headers).get(RECEIPT_HEADER)
                if receipt:
                    bind(receipt_id=receipt.decode("latin-1"))
            await send(message)

        with request_context(request_id=request_id):
            try:
                await self.app(scope, receive, send_with_id)
            except Exception as exc:
                request = Request(scope)
                if answering:
                    # A stream that failed past its headers: nothing can be added to it. Logged
                    # here for the request's context; the server ends the connection.
                    problems.log_unhandled(request, exc)
                else:
                    # Answered through this middleware and those outside it, so the 500 carries
                    # the request id and Server-Timing, and its log line the request's context.
                    answer = await problems.on_unexpected(request, exc)
                    await answer(scope, receive, send_with_id)
                # On as before: the span records its type and the server its line; Starlette's
                # catch-all sees a response started and sends nothing, nor logs it again.
                raise
            finally:
                access_log.info(
                    "%s %s %s",
                    scope.get("method", ""),
                    scope.get("path", ""),
                    status,
                    extra={
                        "method": scope.get("method", ""),
                        "path": scope.get("path", ""),
                        "status": status,
                        "duration_ms": round((time.perf_counter() - started) * 1000, 2),
                    },
                )
