"""A webhook receiver on loopback that can be made to fail, or to vanish, and come back."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from domain.cloudevents import verify


@dataclass
class Receiver:
    port: int
    secret: str = ""
    failing: bool = False
    received: list[dict[str, Any]] = field(default_factory=list)
    bad_signatures: int = 0
    refused_while_failing: int = 0
    _server: uvicorn.Server | None = None
    _task: asyncio.Task[None] | None = None

    async def _hook(self, request: Request) -> Response:
        body = await request.body()
        if self.failing:
            self.refused_while_failing += 1
            return Response(status_code=503)
        ok = verify(
            self.secret,
            request.headers["webhook-id"],
            int(request.headers["webhook-timestamp"]),
            body,
            request.headers["webhook-signature"],
        )
        if not ok:
            self.bad_signatures += 1
            return Response(status_code=401)
        self.received.append(json.loads(body))
        return Response(status_code=204)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def start(self) -> None:
        app = Starlette(routes=[Route("/hook", self._hook, methods=["POST"])])
        self._server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="error", lifespan="off")
        )
        self._task = asyncio.create_task(self._server.serve())
        while not self._server.started:
            assert not self._task.done(), "receiver failed to start"
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            await self._task
            self._server = self._task = None
