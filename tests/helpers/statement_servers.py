"""A local statement server speaking both providers' usage APIs, in their real shapes:

- OpenAI `GET /v1/organization/usage/completions` (admin key as Bearer; `start_time`/`end_time`
  in unix seconds, `bucket_width`, repeated `group_by`, `batch`, `limit`, `page`; buckets
  `{"object": "bucket", "start_time", "end_time", "results": [...]}`, `has_more`/`next_page`),
  and `…/usage/embeddings` likewise (no `batch`; results of `input_tokens`, `num_model_requests`);
- Anthropic `GET /v1/organizations/usage_report/messages` (`x-api-key`, `anthropic-version`;
  RFC 3339 `starting_at`/`ending_at`, `bucket_width`, `group_by[]`, `limit`, `page`; results
  with `uncached_input_tokens`, `cache_creation`, `cache_read_input_tokens`, `output_tokens`).

Usage is recorded per (bucket start, model, api key, tier) and aggregated by the requested
group_by, as the providers do. Pages hold `page_size` buckets, so pagination is exercised.
`fail_next` answers that many requests with `fail_status` first.
"""

from __future__ import annotations

import asyncio
import base64
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.conftest import free_port

WIDTH = {"1m": 60, "1h": 3600, "1d": 86400}
OPENAI_TOKENS = ("input_tokens", "output_tokens", "input_cached_tokens", "num_model_requests")
ANTHROPIC_TOKENS = (
    "uncached_input_tokens",
    "cache_read_input_tokens",
    "cache_creation_5m",
    "cache_creation_1h",
    "output_tokens",
)


@dataclass
class Usage:
    start: datetime
    model: str
    api_key_id: str
    tokens: dict[str, int]
    service_tier: str = "standard"


@dataclass
class StatementServer:
    admin_key: str
    page_size: int = 2
    fail_next: int = 0
    fail_status: int = 503
    openai: list[Usage] = field(default_factory=list)
    openai_embeddings: list[Usage] = field(default_factory=list)
    anthropic: list[Usage] = field(default_factory=list)
    requests: list[tuple[str, list[tuple[str, str]]]] = field(default_factory=list)
    _server: uvicorn.Server | None = None
    _task: asyncio.Task[None] | None = None
    port: int = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _fail(self) -> Response | None:
        if self.fail_next <= 0:
            return None
        self.fail_next -= 1
        return JSONResponse(
            {"error": {"message": "usage service unavailable", "type": "server_error"}},
            self.fail_status,
        )

    @staticmethod
    def _page(request: Request, starts: list[datetime], limit: int, size: int) -> tuple[int, int]:
        page = request.query_params.get("page")
        first = int(base64.b64decode(page)) if page else 0
        return first, min(first + min(limit, size), len(starts))

    @staticmethod
    def _starts(start: datetime, end: datetime, width: int) -> list[datetime]:
        first = datetime.fromtimestamp(int(start.timestamp()) // width * width, UTC)
        out = []
        while first < end:
            out.append(first)
            first += timedelta(seconds=width)
        return out

    @staticmethod
    def _grouped(
        rows: list[Usage], groups: list[str], tokens: tuple[str, ...]
    ) -> list[dict[str, Any]]:
        dims = {"model": "model", "api_key_id": "api_key_id", "service_tier": "service_tier"}
        sums: dict[tuple[Any, ...], dict[str, int]] = defaultdict(lambda: dict.fromkeys(tokens, 0))
        for row in rows:
            key = tuple(getattr(row, dims[g]) if g in groups else None for g in dims)
            for name in tokens:
                sums[key][name] += row.tokens.get(name, 0)
        return [
            {**dict(zip(dims, key, strict=True)), **values} for key, values in sorted(sums.items())
        ]

    async def _openai(self, request: Request) -> Response:
        return await self._openai_usage(request, self.openai, "completions")

    async def _openai_embeddings(self, request: Request) -> Response:
        return await self._openai_usage(request, self.openai_embeddings, "embeddings")

    async def _openai_usage(self, request: Request, usage: list[Usage], kind: str) -> Response:
        self.requests.append((request.url.path, list(request.query_params.multi_items())))
        if request.headers.get("authorization") != f"Bearer {self.admin_key}":
            return JSONResponse({"error": {"message": "Incorrect API key provided"}}, 401)
        failing = self._fail()
        if failing is not None:
            return failing
        q = request.query_params
        width = q.get("bucket_width", "1d")
        start = datetime.fromtimestamp(int(q["start_time"]), UTC)
        end = datetime.fromtimestamp(int(q["end_time"]), UTC) if "end_time" in q else start
        starts = self._starts(start, end, WIDTH[width])
        first, last = self._page(request, starts, int(q.get("limit", 7)), self.page_size)
        groups = q.getlist("group_by")
        data = []
        for at in starts[first:last]:
            rows = [u for u in usage if at <= u.start < at + timedelta(seconds=WIDTH[width])]
            if q.get("batch") == "false":
                rows = [u for u in rows if u.service_tier != "batch"]
            results = [
                {
                    "object": f"organization.usage.{kind}.result",
                    "input_audio_tokens": 0,
                    "output_audio_tokens": 0,
                    "project_id": None,
                    "user_id": None,
                    "batch": None,
                    **{k: v for k, v in r.items() if k != "service_tier"},
                }
                for r in self._grouped(rows, groups, OPENAI_TOKENS)
            ]
            data.append(
                {
                    "object": "bucket",
                    "start_time": int(at.timestamp()),
                    "end_time": int(at.timestamp()) + WIDTH[width],
                    "results": results,
                }
            )
        more = last < len(starts)
        return JSONResponse(
            {
                "object": "page",
                "data": data,
                "has_more": more,
                "next_page": base64.b64encode(str(last).encode()).decode() if more else None,
            }
        )

    async def _anthropic(self, request: Request) -> Response:
        self.requests.append((request.url.path, list(request.query_params.multi_items())))
        if request.headers.get("x-api-key") != self.admin_key:
            return JSONResponse(
                {"type": "error", "error": {"type": "authentication_error", "message": "bad"}},
                401,
            )
        if request.headers.get("anthropic-version") != "2023-06-01":
            return JSONResponse({"type": "error", "error": {"message": "version"}}, 400)
        failing = self._fail()
        if failing is not None:
            return failing
        q = request.query_params
        width = q.get("bucket_width", "1d")
        start = datetime.fromisoformat(q["starting_at"].replace("Z", "+00:00"))
        end = datetime.fromisoformat(q["ending_at"].replace("Z", "+00:00"))
        starts = self._starts(start, end, WIDTH[width])
        first, last = self._page(request, starts, int(q.get("limit", 7)), self.page_size)
        groups = q.getlist("group_by[]")
        data = []
        for at in starts[first:last]:
            span = timedelta(seconds=WIDTH[width])
            rows = [u for u in self.anthropic if at <= u.start < at + span]
            results = []
            for r in self._grouped(rows, groups, ANTHROPIC_TOKENS):
                results.append(
                    {
                        "uncached_input_tokens": r["uncached_input_tokens"],
                        "cache_creation": {
                            "ephemeral_1h_input_tokens": r["cache_creation_1h"],
                            "ephemeral_5m_input_tokens": r["cache_creation_5m"],
                        },
                        "cache_read_input_tokens": r["cache_read_input_tokens"],
                        "output_tokens": r["output_tokens"],
                        "server_tool_use": {"web_search_requests": 0},
                        "api_key_id": r["api_key_id"],
                        "workspace_id": None,
                        "model": r["model"],
                        "service_tier": r["service_tier"],
                        "context_window": "0-200k",
                    }
                )
            data.append(
                {
                    "starting_at": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "ending_at": (at + span).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "results": results,
                }
            )
        more = last < len(starts)
        return JSONResponse(
            {
                "data": data,
                "has_more": more,
                "next_page": base64.b64encode(str(last).encode()).decode() if more else None,
            }
        )

    async def __aenter__(self) -> StatementServer:
        self.port = free_port()
        app = Starlette(
            routes=[
                Route("/v1/organization/usage/completions", self._openai, methods=["GET"]),
                Route(
                    "/v1/organization/usage/embeddings", self._openai_embeddings, methods=["GET"]
                ),
                Route("/v1/organizations/usage_report/messages", self._anthropic, methods=["GET"]),
            ]
        )
        self._server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="error", lifespan="off")
        )
        self._task = asyncio.create_task(self._server.serve())
        while not self._server.started:
            assert not self._task.done(), "statement server failed to start"
            await asyncio.sleep(0.01)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None and self._task is not None
        self._server.should_exit = True
        await self._task
