"""A TCP proxy in front of a server (PostgreSQL, in the tests) whose connections can go silent
without closing, as a database failover leaves them: `sever()` stops every connection open now
from passing another byte either way, while they stay open (no reset, no close: their peer is
a host that is gone, and TCP would keep trying for about 15 minutes). Connections made after it
pass as before, to the server that took over. `sever(hold=True)` silences them the same way but
keeps them, and `restore()` lets them pass again with what they held: a partition that heals,
delivering a statement sent into it after its sender gave up on it. `hold_replies()` holds
only what the server sends, on every connection, until `restore_replies()`: requests land and
are acted on, their answers late (a server slow to answer, a congested path back)."""

from __future__ import annotations

import asyncio
import contextlib

from tests.conftest import free_port


class SeverableProxy:
    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self.port = free_port()
        self._server: asyncio.Server | None = None
        self._pumps: set[asyncio.Task[None]] = set()
        # One per connection: set while it passes bytes.
        self._open: list[asyncio.Event] = []
        self._held: list[asyncio.Event] = []
        self._writers: list[asyncio.StreamWriter] = []
        # sever(partition=True): new connections are held too, until restore().
        self._partitioned = False
        # Set while what the server sends passes (hold_replies).
        self._replies = asyncio.Event()
        self._replies.set()

    async def __aenter__(self) -> SeverableProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._server is not None:
            self._server.close()
        for pump in list(self._pumps):
            pump.cancel()
        for pump in list(self._pumps):
            with contextlib.suppress(BaseException):
                await pump
        for writer in self._writers:  # the severed ones too: their server side ends now
            writer.close()

    def sever(self, hold: bool = False, partition: bool = False) -> int:
        """Silence every connection open now; how many there were. Held (`hold`), they can be
        restored. `partition`: connections made from now on are silent and held as well, until
        `restore()` (the server is unreachable, not replaced)."""
        self._partitioned = partition
        hold = hold or partition
        for passing in self._open:
            passing.clear()
        if hold:
            self._held += self._open
        severed, self._open = len(self._open), []
        return severed

    def restore(self) -> int:
        """Let the held connections pass again, their bytes held meanwhile delivered now."""
        self._partitioned = False
        for passing in self._held:
            passing.set()
        restored, self._held = len(self._held), []
        return restored

    def hold_replies(self) -> None:
        """From now on, nothing the server sends reaches its client, on any connection."""
        self._replies.clear()

    def restore_replies(self) -> None:
        """What the server sent meanwhile is delivered now, and what it sends later passes."""
        self._replies.set()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.close()
            return
        passing = asyncio.Event()
        if self._partitioned:
            self._held.append(passing)  # silent from the start, until restore()
        else:
            passing.set()
            self._open.append(passing)
        self._writers += [writer, up_writer]
        for source, sink, replies in (
            (reader, up_writer, None),
            (up_reader, writer, self._replies),
        ):
            pump = asyncio.create_task(self._pump(source, sink, passing, replies))
            self._pumps.add(pump)
            pump.add_done_callback(self._pumps.discard)

    async def _pump(
        self,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        passing: asyncio.Event,
        replies: asyncio.Event | None,
    ) -> None:
        try:
            while chunk := await source.read(65536):
                await passing.wait()  # a severed connection waits here for good
                if replies is not None:
                    await replies.wait()
                sink.write(chunk)
                await sink.drain()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            if passing.is_set():  # a severed one never tells its peer it ended
                sink.close()
