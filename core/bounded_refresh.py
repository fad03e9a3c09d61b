"""A refresh a request waits on for a bounded time, one run at a time: the usage_unknown
recount both /metrics endpoints (the API's, the worker's) run before a scrape.

Prometheus gives a scrape 10 s by default, and a store that hangs (frozen, partitioned) rather
than refuses held each scrape for the pool's wait and the statement's bound, 30 s and more:
every target read as down, every other metric gone with it, in the outage they are for, and
each abandoned scrape's recount held a pool connection of its own. So a scrape waits at most
WAIT_SECONDS, a scrape meanwhile waits on the same run rather than starting another, and a run
that does not end in time is left to finish rather than cancelled (a cancelled one still waited
for its session's close on a hung server): the last values are exported meanwhile."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

WAIT_SECONDS = 2.0


class BoundedRefresh:
    def __init__(
        self, refresh: Callable[[], Awaitable[object]], wait: float = WAIT_SECONDS
    ) -> None:
        self._refresh = refresh
        self._wait = wait
        self._run: asyncio.Task[None] | None = None

    async def __call__(self) -> bool:
        """Run the refresh (or join the one under way) and wait for it at most the bound;
        whether it ended in time. It never raises: a failed refresh is logged, by type."""
        if self._run is None or self._run.done():
            self._run = asyncio.ensure_future(self._guarded())
        done, _ = await asyncio.wait({self._run}, timeout=self._wait)
        if not done:
            log.warning("metrics refresh still waiting (on the store); the last values exported")
        return bool(done)

    async def _guarded(self) -> None:
        try:
            await self._refresh()
        except Exception as exc:  # a scrape still answers with what the process has
            log.warning("metrics refresh failed: %s", type(exc).__name__)

    async def aclose(self) -> None:
        """Ends a run still under way (at the process's shutdown), waiting for it at most the
        bound: a cancelled recount still waits for its session's close on a hung server, and a
        shutdown behind it would wait as long."""
        if self._run is not None and not self._run.done():
            self._run.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait({self._run}, timeout=self._wait)
