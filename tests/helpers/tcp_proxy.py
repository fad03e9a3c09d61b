"""A TCP proxy in front of a server (PostgreSQL, in the tests) whose connections can go silent
without closing, as a database failover leaves them: `sever()` stops every connection open now
from passing another byte either way, while they stay open (no reset, no close: their peer is
a host that is gone, and TCP would keep trying for about 15 minutes). Connections made after it
pass as before, to the server that took over. `sever(hold=True)` silences them the same way but
keeps them, and `restore()` lets them pass again with what they held: a partition that heals,
delivering a statement sent into it after its sender gave up on it. `hold_replies()` holds
only what the server sends, on every connection, until `restore_replies()`: requests land and
are acted on, their answers late (a server slow to answer, a congested path back).
`cut_request_with(marker)` lets the next request carrying `marker` reach the server and then
resets its client's connection before any answer: a reply lost after the server acted on it;
with `then_down`, every other connection is reset with it and new ones are refused until
`restore()`: the server went away just after it acted (a crash, a failover under way).
`refuse()` alone turns every new connection away."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

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
        # cut_request_with: the bytes a request to cut carries, until one has been cut.
        self._cut: bytes | None = None
        self._cut_then_down = False
        # Set while new connections are turned away at once (reset before any byte), and how
        # many have been.
        self._refusing = False
        self.refused = 0
        # The start of every chunk a client sent on (its request line, for a request's first).
        self.sent: list[bytes] = []
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
        self._refusing = False
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

    def cut_request_with(self, marker: bytes, *, then_down: bool = False) -> None:
        """The next request carrying `marker` (a bound parameter's bytes) reaches the server, and
        its client's connection is reset before any answer comes back; with `then_down`, every
        other connection too, and new ones are refused until `restore()`."""
        self._cut = marker
        self._cut_then_down = then_down

    def refuse(self) -> None:
        """Turn every new connection away (reset) until `restore()`."""
        self._refusing = True

    def cut_pending(self) -> bool:
        """Whether the request to cut has not come yet."""
        return self._cut is not None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._refusing:
            self.refused += 1
            writer.transport.abort()
            return
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
        # This connection's own replies: stopped for good when a request on it is cut.
        own = asyncio.Event()
        own.set()

        def forwarded(chunk: bytes) -> None:
            self.sent.append(chunk[:200])
            if self._cut is not None and self._cut in chunk:
                self._cut = None
                own.clear()
                writer.transport.abort()  # an RST: the client never hears the answer
                if self._cut_then_down:
                    self._refusing = True
                    # Every other connection, not this one's way to the server: reset too, the
                    # server could drop the request it had not read yet (a reset discards what
                    # waits in its socket), and the request this cut lets through did not
                    # always land (seen once in CI, under load).
                    for other in self._writers:
                        if other is not writer and other is not up_writer:
                            other.transport.abort()

        for source, sink, replies in (
            (reader, up_writer, [passing]),
            (up_reader, writer, [passing, self._replies, own]),
        ):
            pump = asyncio.create_task(
                self._pump(source, sink, replies, forwarded if sink is up_writer else None)
            )
            self._pumps.add(pump)
            pump.add_done_callback(self._pumps.discard)

    async def _pump(
        self,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        gates: list[asyncio.Event],
        forwarded: Callable[[bytes], None] | None,
    ) -> None:
        """Relay `source` to `sink` while every gate is open; the first gate is the
        connection's own (sever), the others hold replies."""
        try:
            while chunk := await source.read(65536):
                for gate in gates:
                    await gate.wait()  # a severed connection waits here for good
                sink.write(chunk)
                await sink.drain()
                if forwarded is not None:
                    forwarded(chunk)
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            if gates[0].is_set():  # a severed one never tells its peer it ended
                sink.close()
