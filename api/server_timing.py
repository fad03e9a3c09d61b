"""`Server-Timing` on every gateway response: the gateway's own time apart from the provider's,
as measured up to the response's first byte (for a stream: up to its headers, so the provider's
part is its time to the first event). `gateway;dur` + `provider;dur` = `total;dur`. A request that
reached a provider also records the gateway's part in the `overhead` histogram."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core import metrics, timing

HEADER = b"server-timing"


class ServerTimingMiddleware:
    """Pure ASGI, so streaming responses are not buffered."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        current = timing.begin()

        async def send_with_timing(message: Message) -> None:
            if message["type"] == "http.response.start":
                total, gateway, provider = current.split()
                value = (
                    f'gateway;dur={gateway:.2f};desc="model-router", '
                    f"provider;dur={provider:.2f}, total;dur={total:.2f}"
                )
                message["headers"] = [*message.get("headers", []), (HEADER, value.encode())]
                if current.invoked:
                    metrics.overhead.record(gateway / 1000)
            await send(message)

        try:
            await self.app(scope, receive, send_with_timing)
        finally:
            current.responded()
