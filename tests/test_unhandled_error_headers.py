"""An exception no handler took is answered inside the middleware chain: its 500 is problem+json
carrying X-Request-Id and Server-Timing (api/server_timing.py promises it on every response),
and its one "unhandled error" log line carries the request id and tenant. Starlette's own
catch-all runs outside every middleware: its 500 had neither header and its line no context.
A stream that fails past its headers is left as it was: cut, and the server goes on."""

from __future__ import annotations

import io
import json
import logging
import uuid
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from fastapi.responses import StreamingResponse
from opentelemetry.trace import StatusCode
from temporalio.client import Client

from core.logging import JsonFormatter, bind
from core.settings import Settings
from tests.helpers import spans as span_helpers
from tests.helpers.deadline import eventually
from tests.helpers.stack import Served, serve

CANARY = "CANARY-unhandled-7e1f"


class _Lines(logging.Handler):
    """The JSON lines the process writes (a plain StreamHandler would be taken off the root by
    `configure_logging`)."""

    def __init__(self) -> None:
        super().__init__()
        self.out = io.StringIO()
        self.setFormatter(JsonFormatter())

    def emit(self, record: logging.LogRecord) -> None:
        self.out.write(self.format(record) + "\n")

    def lines(self) -> list[dict[str, object]]:
        return [json.loads(line) for line in self.out.getvalue().splitlines()]


@pytest.fixture
async def api(settings: Settings, temporal_client: Client) -> AsyncIterator[Served]:
    async with serve(settings, temporal_client) as served:
        app = served.app

        @app.get("/test-only/boom")
        async def boom(tenant: str) -> None:
            bind(tenant=tenant)
            raise RuntimeError(CANARY)

        @app.get("/test-only/stream-boom")
        async def stream_boom() -> StreamingResponse:
            async def body() -> AsyncIterator[bytes]:
                yield b"first\n"
                raise RuntimeError(CANARY)

            return StreamingResponse(body(), media_type="text/plain")

        yield served


@pytest.fixture
def logged() -> Iterator[_Lines]:
    handler = _Lines()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)


def _unhandled(lines: list[dict[str, object]], request_id: str) -> list[dict[str, object]]:
    return [
        line
        for line in lines
        if str(line["message"]).startswith("unhandled error")
        and line.get("request_id") == request_id
    ]


async def test_an_unhandled_500_carries_the_request_id_server_timing_and_log_context(
    api: Served, logged: _Lines, tenant: str, spans: span_helpers.SpanCapture
) -> None:
    request_id = f"boom-{uuid.uuid4().hex}"
    async with httpx.AsyncClient(base_url=api.url, timeout=30) as http:
        resp = await http.get(
            "/test-only/boom", params={"tenant": tenant}, headers={"X-Request-Id": request_id}
        )
    assert resp.status_code == 500
    assert resp.headers["content-type"] == "application/problem+json"
    assert resp.headers["x-request-id"] == request_id
    assert "gateway;dur=" in resp.headers["server-timing"]
    body = resp.json()
    assert body["status"] == 500 and body["detail"] == "An internal error occurred."
    assert body["requestId"] == request_id
    assert CANARY not in resp.text and "RuntimeError" not in resp.text

    # One line, in the request's context; the exception's text in none.
    lines = logged.lines()
    [line] = _unhandled(lines, request_id)
    assert line["tenant"] == tenant and line["level"] == "ERROR"
    assert "RuntimeError" in str(line["message"])
    assert not [
        x for x in lines if str(x["message"]).startswith("unhandled error") and x is not line
    ]
    assert CANARY not in logged.out.getvalue()

    # The server span still records the exception's type, as before.
    def server_span() -> object:
        return next(
            (
                s
                for s in spans.spans
                if (s.attributes or {}).get("model_router.request_id") == request_id
            ),
            None,
        )

    span = await eventually(server_span)
    assert span.attributes["error.type"] == "RuntimeError"
    assert span.status.status_code is StatusCode.ERROR


async def test_a_stream_failing_past_its_headers_is_cut_and_the_server_goes_on(
    api: Served, logged: _Lines
) -> None:
    request_id = f"stream-{uuid.uuid4().hex}"
    async with httpx.AsyncClient(base_url=api.url, timeout=30) as http:
        with pytest.raises(httpx.RemoteProtocolError):
            async with http.stream(
                "GET", "/test-only/stream-boom", headers={"X-Request-Id": request_id}
            ) as resp:
                # Sent before the failure, with the headers it had: nothing is added later.
                assert resp.status_code == 200
                assert resp.headers["x-request-id"] == request_id
                assert "server-timing" in resp.headers
                async for _ in resp.aiter_bytes():
                    pass
        assert (await http.get("/healthz")).status_code == 200

    [line] = _unhandled(logged.lines(), request_id)
    assert "RuntimeError" in str(line["message"])
    assert CANARY not in logged.out.getvalue()
