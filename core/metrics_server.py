"""The worker's own `GET /metrics` (Prometheus text) on `WORKER_METRICS_HOST:PORT`: probes,
the reconciler and finished invocations record their metrics in the worker, which serves no
API. Before each scrape `before_scrape` runs (the worker recounts usage_unknown from the
store), one run at a time, waited on for at most REFRESH_WAIT_SECONDS. With a token
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

from core.scrape_auth import scrape_allowed

log = logging.getLogger(__name__)

# How long a scrape waits for `before_scrape`, as the API's /metrics waits for its recount
# (api/routers/metrics.py, RECOUNT_WAIT_SECONDS): Prometheus gives a scrape 10 s by default, and
# a store that hangs (frozen, partitioned) rather than refuses held every scrape for the pool's
# wait and the statement's bound, 30 s and more. Every worker series vanished in the outage
# they are for, and each abandoned scrape's recount held a pool connection of its own.
REFRESH_WAIT_SECONDS = 2.0


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
            await self._refreshed(before_scrape)
            return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

        app = Starlette(routes=[Route("/metrics", scrape, methods=["GET"])])
        self._server = uvicorn.Server(
            uvicorn.Config(
                app, host=host, port=port, log_config=None, access_log=False, lifespan="off"
            )
        )
        self._task: asyncio.Task[None] | None = None
        self._refresh: asyncio.Task[None] | None = None

    async def _refreshed(self, before_scrape: Callable[[], Awaitable[None]]) -> None:
        """`before_scrape` as one run at a time in its own task, waited on for at most
        REFRESH_WAIT_SECONDS; a scrape meanwhile waits on the same run rather than starting
        another. One that does not end in time leaves the last values exported and is left to
        finish rather than cancelled (a cancelled recount still waited for its session's close
        on a hung server)."""
        if self._refresh is None or self._refresh.done():
            self._refresh = asyncio.ensure_future(_refresh(before_scrape))
        done, _ = await asyncio.wait({self._refresh}, timeout=REFRESH_WAIT_SECONDS)
        if not done:
            log.warning("metrics refresh still waiting (on the store); the last values exported")

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


async def _refresh(before_scrape: Callable[[], Awaitable[None]]) -> None:
    try:
        await before_scrape()
    except Exception as exc:  # a scrape still answers with what the process has
        log.warning("metrics refresh failed: %s", type(exc).__name__)
