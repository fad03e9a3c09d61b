"""Temporal's TLS files read again while a process runs, and a new client used once they change.

The client presents its certificate (and trusts its CA) as the files read when it connected; it
keeps its connection, and presents the same certificate again on every reconnect. A client
certificate rotated on disk (cert-manager renews one well before it expires; Temporal Cloud asks
for rotation before a CA's expiry) was therefore never used by a running process: the day the
server stopped taking the old one, the next reconnect (a frontend restart, a network blip)
failed for good, and every call was refused until the process was restarted.

Every `every` seconds the files' bytes are compared with those the client in use was connected
with. When they differ, a new client is connected with them; only once it has connected (a
handshake and a health call) is it handed to `swap`, which points every holder at it (the
workers take it for their next poll: `Worker.client`). A new pair that does not connect (a
certificate written before its key, a key that does not match) keeps the working client, and is
tried again at the next look. The old client's calls under way complete on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from temporalio.client import Client

from core.settings import Settings
from core.temporal import connect

log = logging.getLogger("model_router.temporal")

Material = tuple[bytes | None, ...]


def tls_files(settings: Settings) -> list[Path]:
    """The TLS files the client is connected with: none, then nothing is watched."""
    named = (
        settings.temporal_tls_server_ca_cert,
        settings.temporal_tls_client_cert,
        settings.temporal_tls_client_key,
    )
    return [p for p in named if p is not None]


def read_material(files: list[Path]) -> Material:
    """Each file's bytes, None for one that cannot be read now (mid-rewrite, or removed)."""
    found: list[bytes | None] = []
    for path in files:
        try:
            found.append(path.read_bytes())
        except OSError:
            found.append(None)
    return tuple(found)


class TlsRotation:
    def __init__(
        self,
        settings: Settings,
        swap: Callable[[Client], None],
        *,
        connects: Callable[[Settings], Awaitable[Client]] = connect,
    ) -> None:
        self._settings = settings
        self._swap = swap
        self._connects = connects
        self._files = tls_files(settings)
        self._in_use = read_material(self._files)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Watch the files, if there are any to watch."""
        if self._files and self._task is None:
            self._task = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        every = self._settings.temporal_tls_reload_seconds
        while True:
            await asyncio.sleep(every)  # a polling interval, not a wait-for
            try:
                await self.look()
            except Exception as exc:  # the watch goes on: it is all that follows a rotation
                log.warning("temporal TLS files not followed this time: %s", type(exc).__name__)

    async def look(self) -> bool:
        """Connect with the files as they are now if they changed; whether a new client is in
        use."""
        now = read_material(self._files)
        if now == self._in_use or None in now:
            return False
        try:
            client = await self._connects(self._settings)
        except Exception as exc:  # the working client stays; tried again at the next look
            log.warning(
                "temporal TLS files changed but do not connect (%s): keeping the client in use",
                type(exc).__name__,
            )
            return False
        self._swap(client)  # raising, the files are tried again at the next look
        self._in_use = now
        log.info("temporal TLS files changed: a client connected with them is in use")
        return True

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
