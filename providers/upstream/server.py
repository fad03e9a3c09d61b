"""Runs the simulator with uvicorn inside the caller's event loop (tests, dev)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from types import TracebackType

import uvicorn

from providers.upstream.app import create_app
from providers.upstream.faults import Fault
from providers.upstream.responders import Responder
from providers.upstream.state import UpstreamState


class _EmbeddedServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # Embedded in someone else's process: their signal handling stays theirs.
        yield


class UpstreamServer:
    """`async with UpstreamServer() as upstream:` serves the simulator on 127.0.0.1 and a port
    the OS picks; `upstream.base_url` is where to point SDKs (`openai_base_url` for OpenAI's,
    whose paths start after /v1) and `upstream.state` is the live simulator state."""

    def __init__(
        self,
        state: UpstreamState | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        startup_timeout: float = 10.0,
    ) -> None:
        self.state = state if state is not None else UpstreamState()
        self.host = host
        self._port = port
        self._startup_timeout = startup_timeout
        self._server: _EmbeddedServer | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def port(self) -> int:
        if self._server is None or not self._server.servers:
            raise RuntimeError("the upstream simulator is not running")
        sockname = self._server.servers[0].sockets[0].getsockname()
        return int(sockname[1])

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.base_url}/v1"

    @property
    def endpoint_ref(self) -> str:
        """The endpointRef a deployment uses to name this simulator."""
        return f"upstream:{self.host}:{self.port}"

    # Conveniences over `state`, the calls tests make most.
    def register(self, model: str, responder: Responder) -> None:
        self.state.register(model, responder)

    def inject(self, model: str, fault: Fault) -> None:
        self.state.inject(model, fault)

    def release(self) -> None:
        self.state.release()

    def requests(self, model: str | None = None, endpoint: str | None = None) -> int:
        return self.state.stats.count(model, endpoint)

    async def start(self) -> None:
        config = uvicorn.Config(
            create_app(self.state),
            host=self.host,
            port=self._port,
            log_config=None,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=2,
            timeout_keep_alive=30,
        )
        # A fresh event: one bound to an earlier event loop cannot be awaited in this one.
        self.state.shutdown = asyncio.Event()
        self._server = _EmbeddedServer(config)
        self._task = asyncio.create_task(self._server.serve())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._startup_timeout
        while not self._server.started:
            if self._task.done():
                self._task.result()
                raise RuntimeError("the upstream simulator stopped during startup")
            if loop.time() > deadline:
                raise RuntimeError("the upstream simulator did not start")
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        if self._server is None or self._task is None:
            return
        # Release hanging and stalled responses first, or shutdown would wait for them.
        self.state.shutdown.set()
        self._server.should_exit = True
        await self._task
        self._server = None
        self._task = None

    async def __aenter__(self) -> UpstreamServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
