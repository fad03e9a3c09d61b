"""The FastAPI app factory."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI
from temporalio.client import Client

from api import console, problems, refusals
from api.limits import LimitsMiddleware
from api.middleware import RequestIdMiddleware
from api.routers import (
    deployments,
    events,
    gateway,
    health,
    messages,
    metrics,
    oauth,
    openai,
    pricebook,
    profiles,
    receipts,
    responses,
    routing,
    usage_statements,
)
from api.runtime import Runtime
from api.server_timing import ServerTimingMiddleware
from api.text_bodies import refuse_what_is_not_text
from api.tracing import TracingMiddleware
from core import gc_tuning, tracing
from core import metrics as instruments
from core.logging import configure_logging
from core.security import TokenVerifier
from core.settings import Settings, get_settings
from core.settings_rules import open_metrics


def create_app(settings: Settings | None = None, temporal_client: Client | None = None) -> FastAPI:
    settings = settings or get_settings()
    if settings.auth_algorithm == "HS256" and settings.auth_jwt_secret is None:
        raise RuntimeError("MODEL_ROUTER_AUTH_JWT_SECRET must be set (HS256 signing key)")
    configure_logging(settings.log_level, json_lines=settings.log_json)
    if (warning := open_metrics(settings, served=settings.metrics_enabled)) is not None:
        logging.getLogger("model_router.api").warning(warning)
    tracing.configure_exporters(
        service_name="model-router", otlp_endpoint=settings.otlp_traces_endpoint
    )

    # One verifier for the middleware and the routes: the middleware never fetches a key set
    # (it runs on the event loop), so it verifies with the keys a route fetched off the loop.
    verifier = TokenVerifier(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        runtime = Runtime(settings, temporal_client, verifier)
        app.state.runtime = runtime
        await runtime.startup()  # connect early when possible; readiness reports otherwise
        gc_tuning.settle()
        try:
            yield
        finally:
            await runtime.close()
            tracing.shutdown()

    app = FastAPI(
        title="model-router",
        version="0.1.0",
        summary="Model-access gateway: profiles resolved to evaluated deployments, with receipts.",
        lifespan=lifespan,
        dependencies=[Depends(refuse_what_is_not_text)],
        # FastAPI's own telemetry records query strings, and exception messages as logs; either
        # can carry content. The request span is api/tracing.py's, which records neither.
        telemetry={
            "tracing": False,
            "metrics": False,
            "logs": False,
            "operation_spans": False,
            "auto_configure": False,
        },
    )
    # Added first so it runs inside RequestIdMiddleware: its refusals carry the request id and
    # get an access line too.
    app.add_middleware(LimitsMiddleware, settings=settings, verifier=verifier)
    app.add_middleware(RequestIdMiddleware)
    # Outermost but tracing: its total covers every other middleware's work.
    app.add_middleware(ServerTimingMiddleware)
    # Outermost: the server span covers everything, and the request id is known when it ends.
    app.add_middleware(TracingMiddleware)
    problems.install(app)
    refusals.install(app)
    app.state.error_envelopes = dict([messages.ENVELOPE, responses.ENVELOPE, *openai.ENVELOPES])
    if settings.metrics_enabled or settings.otlp_metrics_endpoint:
        app.state.metrics_registry = instruments.configure_exporters(
            otlp_endpoint=settings.otlp_metrics_endpoint,
            otlp_interval_seconds=settings.otlp_export_interval_seconds,
        )
    if settings.metrics_enabled:
        app.include_router(metrics.router)
    # The invocation surfaces first: a request is matched against each route in turn, and the
    # 27 operator routes ahead of /v1/chat/completions cost about 0.1 ms a call on the loaded
    # machine (FastAPI's route matching, 1.5 % of the API's main thread in a c=1 profile,
    # 2026-12-03). No path of one group is a path of the other, so the order changes no answer.
    for module in (
        openai,
        messages,
        responses,
        gateway,
        health,
        oauth,
        profiles,
        deployments,
        pricebook,
        routing,
        events,
        receipts,
        usage_statements,
    ):
        app.include_router(module.router)
    console.install(app)
    return app
