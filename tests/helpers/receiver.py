"""A webhook receiver on loopback that can be made to fail, or to vanish, and come back. It checks
deliveries as a subscriber would, with the libraries of the two standards: the signature with
`standardwebhooks`, the body with the `cloudevents` SDK."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from cloudevents.core.base import BaseCloudEvent
from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent
from standardwebhooks import Webhook, WebhookVerificationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route


@dataclass
class Receiver:
    port: int
    secret: str = ""
    failing: bool = False
    # What the receiver answers while failing (410: gone for good).
    failing_status: int = 503
    # Refuse (503) the event that would be the n-th received, once.
    refuse_once_at: int | None = None
    # Seconds the receiver takes before it answers a delivery, as a slow one does.
    delay: float = 0.0
    received: list[dict[str, Any]] = field(default_factory=list)
    # The same deliveries as the CloudEvents SDK reads them.
    events: list[BaseCloudEvent] = field(default_factory=list)
    bad_signatures: int = 0
    refused_while_failing: int = 0
    _server: uvicorn.Server | None = None
    _task: asyncio.Task[None] | None = None

    async def _hook(self, request: Request) -> Response:
        body = await request.body()
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.failing:
            self.refused_while_failing += 1
            return Response(status_code=self.failing_status)
        try:
            Webhook(self.secret).verify(body, dict(request.headers), json_parse=False)
        except WebhookVerificationError:
            self.bad_signatures += 1
            return Response(status_code=401)
        if self.refuse_once_at is not None and len(self.received) == self.refuse_once_at:
            self.refuse_once_at = None
            self.refused_while_failing += 1
            return Response(status_code=503)
        self.received.append(json.loads(body))
        self.events.append(JSONFormat().read(CloudEvent, body))
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
