"""A TCP proxy in front of the upstream simulator that hangs up on requests the way a provider
closing its idle kept-alive connections does: a request goes out on a connection that the other
side closes (or resets) before answering it, and never reaches the server behind it. Connections
that went idle together (after a burst) time out together, so the requests that a next burst
sends on them are hung up on together: the proxy holds each until every armed connection has
one, then hangs up on all of them at once."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from dataclasses import dataclass

from core.local_ports import free_port


@dataclass
class _Connection:
    client: asyncio.StreamWriter
    armed: bool  # hangs up on its next request


class HangUpProxy:
    def __init__(self, host: str, port: int, *, reset: bool = False) -> None:
        self._target = (host, port)
        self._reset = reset  # an RST rather than a FIN
        self.port = free_port()
        self.connections = 0  # accepted from clients
        self.hung_up = 0  # requests hung up on
        self._always = False
        self._open: list[_Connection] = []
        self._armed = 0  # connections armed by the last hang_up_open
        self._held = 0  # requests held on them
        self._all_held = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> HangUpProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    def hang_up_open(self) -> int:
        """Every connection open now hangs up on its next request; how many there are."""
        live = [c for c in self._open if not c.client.is_closing()]
        for connection in live:
            connection.armed = True
        self._armed, self._held = len(live), 0
        self._all_held.clear()
        return len(live)

    def open_connections(self) -> int:
        """Connections from clients still open: a client's close ends its connection here."""
        return sum(not c.client.is_closing() for c in self._open)

    def hang_up_always(self) -> None:
        """Every request from now on, on any connection, new ones included, is hung up on."""
        self._always = True
        self.hang_up_open()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        connection = _Connection(writer, armed=self._always)
        self._open.append(connection)
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.close()
            return
        for pump in (
            self._requests(reader, connection, up_writer),
            self._answers(up_reader, writer),
        ):
            task = asyncio.create_task(pump)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _requests(
        self, reader: asyncio.StreamReader, connection: _Connection, upstream: asyncio.StreamWriter
    ) -> None:
        try:
            while chunk := await reader.read(65536):
                if connection.armed:
                    await self._hold()
                    self.hung_up += 1
                    self._hang_up(connection.client)
                    break
                upstream.write(chunk)
                await upstream.drain()
        except OSError:
            pass
        finally:
            connection.client.close()
            upstream.close()

    def _hang_up(self, client: asyncio.StreamWriter) -> None:
        sock = client.get_extra_info("socket")
        if self._reset and sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()

    async def _hold(self) -> None:
        """Until every connection armed together has a request (or 10 s, should one never get
        one); a connection armed on its own (`hang_up_always`) is not held."""
        if self._always:
            return
        self._held += 1
        if self._held >= self._armed:
            self._all_held.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._all_held.wait(), 10)

    async def _answers(self, reader: asyncio.StreamReader, client: asyncio.StreamWriter) -> None:
        try:
            while chunk := await reader.read(65536):
                client.write(chunk)
                await client.drain()
        except OSError:
            pass
        finally:
            client.close()
