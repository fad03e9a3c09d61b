"""Claims this API process gave up on whose statement may still land: undone if they do.

A claim sent on a connection that then went silent (a database frozen, a failover, a partition)
is given up after `INVOKE_STORE_WAIT_SECONDS`: the caller gets a 503 saying nothing was claimed
and the key may be sent again. But the statement was on its way, and when the path comes back
the server may still apply it: a receipt nobody will call the provider for or close, which made
the key's retry a 503 `invocation-in-progress` and then, once swept, a 409 `invocation-closed`
(10 keys of 637 retried in `bench/bench_faults.py`'s run at 05:35, 2026-12-05, with PostgreSQL
frozen 10 s). So such a claim is kept here, and once a second, while it could still land, every
claim kept is undone in one statement: only if it is still open and still the claim made then
(its start time), never a later claim of the same key by the caller's retry. What lands after
the window is the receipt sweeper's (`domain/sweep.py`: a claim with no workflow, swept past the
same bound): the key is then spent, as before.

Nothing here is on a call's path: only a claim that timed out adds an entry, and one loop serves
all of them, so an outage costs one statement a second, not one per refused call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime

log = logging.getLogger("model_router.api")

# How often the claims kept are undone while they could still land.
RELEASE_INTERVAL_SECONDS = 1.0
# Past this many kept, a further one is left to the sweeper: the loop's one statement stays
# small however long the outage and however many calls it refused.
MAX_KEPT = 5_000

Release = Callable[[Sequence[tuple[uuid.UUID, datetime]]], Awaitable[set[uuid.UUID]]]


class GivenUpClaims:
    def __init__(
        self,
        release: Release,
        window: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._release = release
        self._window = window
        self._clock = clock
        # (invocation id, the claim's start time) -> when to stop undoing it (clock). Keyed by
        # the pair, not the id: every retry of a key claims the same id, and during a freeze
        # each retry's claim can be given up in turn. Keyed by id, the retry's entry replaced
        # the first claim's, so when the database thawed and that first claim landed, the undo
        # matched only the retry's start time: the receipt stayed open with no workflow, the
        # key `invocation-in-progress` until swept, then a 409 `invocation-closed` for a call
        # no provider ever got.
        self._kept: dict[tuple[uuid.UUID, datetime], float] = {}
        self._loop: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._kept)

    def add(self, invocation_id: uuid.UUID, claimed_at: datetime) -> None:
        if len(self._kept) >= MAX_KEPT:
            return
        self._kept[(invocation_id, claimed_at)] = self._clock() + self._window
        if self._loop is None or self._loop.done():
            self._loop = asyncio.create_task(self._undo_while_kept())

    async def _undo_while_kept(self) -> None:
        while self._kept:
            await asyncio.sleep(RELEASE_INTERVAL_SECONDS)  # a retry interval, not a wait-for
            now = self._clock()
            self._kept = {claim: until for claim, until in self._kept.items() if until > now}
            claims = list(self._kept)
            try:
                undone = await self._release(claims)
            except Exception as exc:  # the store still away: the next round tries again
                log.info("given-up claims not undone yet: %s", type(exc).__name__)
                continue
            if undone:
                log.warning("undid %d claims that landed after they were given up", len(undone))
            # Landed and undone: that claim cannot land again, so its id is let go. But the
            # release names ids only, and of a key claimed more than once (a retry given up
            # too) it cannot say which claim it undid: the others may land still (the retry's
            # insert queued behind the first one's), so all of them are kept until their bound.
            claimed = Counter(invocation_id for invocation_id, _ in self._kept)
            for claim in [c for c in self._kept if c[0] in undone and claimed[c[0]] == 1]:
                del self._kept[claim]

    async def aclose(self, wait: float) -> None:
        """Goes on undoing for at most `wait` more seconds, then stops. Cancelled at once, a
        process stopping in an outage's wake (a rollout just after a failover) left the claims
        it had given up to land: swept, each key then answered 409 `invocation-closed`, though
        its caller had been told nothing was claimed."""
        if self._loop is None:
            return
        with contextlib.suppress(TimeoutError, Exception):
            await asyncio.wait_for(asyncio.shield(self._loop), wait)
        self._loop.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._loop
