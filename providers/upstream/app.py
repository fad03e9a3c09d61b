"""The simulator's ASGI app. It is a test and development double for real providers: it
answers from scripted responders, not from a model."""

from __future__ import annotations

import time

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from providers.upstream import admin, anthropic_api, openai_api, vectors
from providers.upstream.state import UpstreamState


async def list_models(request: Request) -> Response:
    """One path, two shapes: Anthropic's SDK sends anthropic-version, OpenAI's does not."""
    state: UpstreamState = request.app.state.upstream
    names = state.known_models()
    if "anthropic-version" in request.headers:
        data = [
            {"id": n, "type": "model", "display_name": n, "created_at": "2024-01-01T00:00:00Z"}
            for n in names
        ]
        return JSONResponse(
            {
                "data": data,
                "has_more": False,
                "first_id": names[0] if names else None,
                "last_id": names[-1] if names else None,
            }
        )
    created = int(time.time())
    data_openai = [
        {"id": n, "object": "model", "created": created, "owned_by": "upstream-simulator"}
        for n in names
    ]
    return JSONResponse({"object": "list", "data": data_openai})


async def health(request: Request) -> Response:
    return JSONResponse({"status": "ok", "simulator": True})


def create_app(state: UpstreamState | None = None) -> Starlette:
    app = Starlette(
        routes=[
            Route("/v1/chat/completions", openai_api.chat_completions, methods=["POST"]),
            Route("/v1/messages", anthropic_api.messages, methods=["POST"]),
            Route("/v1/messages/count_tokens", anthropic_api.count_tokens, methods=["POST"]),
            Route("/v1/embeddings", vectors.embeddings, methods=["POST"]),
            Route("/v1/rerank", vectors.rerank, methods=["POST"]),
            Route("/rerank", vectors.rerank, methods=["POST"]),
            Route("/v1/models", list_models, methods=["GET"]),
            Route("/healthz", health, methods=["GET"]),
            *admin.routes,
        ]
    )
    app.state.upstream = state if state is not None else UpstreamState()
    return app
