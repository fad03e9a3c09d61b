"""The worker's own `GET /metrics` (Prometheus text) on `WORKER_METRICS_HOST:PORT`: probes,
the reconciler and finished invocations record their metrics in the worker, which serves no
API. Before each scrape `before_scrape` runs (the worker recounts usage_unknown from the
store), one run at a time, waited on for a bounded time (core/bounded_refresh.py). With a token
(`MODEL_ROUTER_METRICS_TOKEN`) a scrape must carry it (core/scrape_auth.py). uvicorn logs
through the process's own (JSON) logging."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from types import TracebackType

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry
from pydantic import SecretStr
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from core.bounded_refresh import BoundedRefresh
from core.scrape_auth import scrape_allowed

log = logging.getLogger(__name__)


class MetricsServer:
    def __init__(
        self,
        host: str,
        port: int,
        registry: CollectorRegistry,
        before_scrape: Callable[[], Awaitable[None]],
        token: SecretStr | None = None,
    ) -> None:
        async def scrape(request: Request) -> Response:
            if not scrape_allowed(request.headers.get("authorization"), token):
                return Response(
                    "GET /metrics takes the metrics token as a bearer token.\n",
                    status_code=401,
                    headers={"WWW-Authenticate": 'Bearer realm="metrics"'},
                )
            await self._refresh()
            return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

        self._refresh = BoundedRefresh(before_scrape)
        app = Starlette(routes=[Route("/metrics", scrape, methods=["GET"])])
        self._server = uvicorn.Server(
            uvicorn.Config(
                app, host=host, port=port, log_config=None, access_log=False, lifespan="off"
            )
        )
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> MetricsServer:
        self._task = asyncio.create_task(self._server.serve())
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises why it could not start (port in use, …)
                raise RuntimeError("the metrics server stopped at start")
            await asyncio.sleep(0.02)  # uvicorn offers no start event; it binds in ms
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.should_exit = True
        if self._task is not None:
            await self._task
        await self._refresh.aclose()
