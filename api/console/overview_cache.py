"""The overview's figures, read once per tenant and window for a short while.

A view of the overview sums every receipt of its window and ranks every closed one twice
(store/overview_reads.py): on a busy tenant's 7-day window that is seconds of database work,
bounded only by the statement timeout, and any holder of the role could repeat it at will.
Here the figures (and the reconciliation backlog beside them) are kept per (tenant, window) in
the API process:

- for a short time to live (`TTL`), long enough that a reload, a second operator or a
  screen on the wall cost one read, short enough that the page stays current: a fraction of
  one of its bars;
- read once however many views ask at the same moment (single flight): the views of a key
  that has no fresh figures wait on one read instead of each starting its own;
- for at most `capacity` keys, the least recently viewed dropped first, so a process serving
  many tenants holds a bounded amount (each entry is a few hundred summed rows).

The page says when its figures were read ("as of"), and charts them from that moment, so a
figure kept for a while is drawn as it was read, not shifted against a later clock. Each API
process keeps its own: with several, a view may be served by one whose figures are older, by
at most the time to live.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from store.overview_reads import OverviewFigures

# How long a window's figures are served before they are read again. The 24-hour chart's bars
# are 30 minutes and the 7-day chart's 2 hours (overview_data.WINDOWS): 30 s and 120 s are
# each 1/60 of a bar, a change no one reads off the chart, while a 7-day read (the costlier
# one) happens at most every two minutes per tenant and process whoever looks.
TTL: Mapping[str, timedelta] = {
    "24h": timedelta(seconds=30),
    "7d": timedelta(seconds=120),
}
# Keys (tenant, window) kept: a few hundred tenants' pages of a few hundred rows each.
CAPACITY = 256


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Snapshot:
    """The overview's figures as read at `as_of`: the window ends there."""

    as_of: datetime
    figures: OverviewFigures
    backlog: int  # receipts awaiting reconciliation within the reconciler's lookback


Read = Callable[[datetime], Coroutine[object, object, Snapshot]]


@dataclass
class _Flight:
    """A read under way for one key, and how many views wait on it."""

    task: asyncio.Task[Snapshot]
    waiting: int = 0


class OverviewCache:
    """Per (tenant, window) snapshots, one API process's. `clock` is when now is (the tests
    pass one they move), `ttl` how long each window's snapshot is served."""

    def __init__(
        self,
        *,
        ttl: Mapping[str, timedelta] = TTL,
        capacity: int = CAPACITY,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.ttl = ttl
        self.capacity = capacity
        self.clock = clock
        # Least recently viewed first.
        self._kept: OrderedDict[tuple[str, str], Snapshot] = OrderedDict()
        self._flights: dict[tuple[str, str], _Flight] = {}

    async def view(self, tenant_id: str, window: str, read: Read) -> Snapshot:
        """The key's snapshot while it is fresh; otherwise the one `read(now)` makes, shared by
        every view that asks until it ends. A read that fails is kept by no one: its views
        get its error, and the next view reads again."""
        key = (tenant_id, window)
        now = self.clock()
        kept = self._kept.get(key)
        if kept is not None and self._fresh(kept, window, now):
            self._kept.move_to_end(key)
            return kept
        flight = self._flights.get(key)
        if flight is None:
            flight = _Flight(asyncio.create_task(read(now)))
            self._flights[key] = flight
            flight.task.add_done_callback(lambda task: self._landed(key, task))
        flight.waiting += 1
        try:
            # Shielded: a view whose browser went away stops waiting, the read goes on for
            # the others (and lands in the cache for the next).
            return await asyncio.shield(flight.task)
        finally:
            flight.waiting -= 1

    def waiting(self, tenant_id: str, window: str) -> int:
        """How many views wait on the key's read under way (none: no read under way)."""
        flight = self._flights.get((tenant_id, window))
        return 0 if flight is None else flight.waiting

    def forget(self, tenant_id: str, window: str) -> None:
        """Drop the key's snapshot: its next view reads again."""
        self._kept.pop((tenant_id, window), None)

    def __len__(self) -> int:
        return len(self._kept)

    def _fresh(self, kept: Snapshot, window: str, now: datetime) -> bool:
        # A clock stepped back behind the read makes it stale too: its age is unknown.
        return kept.as_of <= now < kept.as_of + self.ttl[window]

    def _landed(self, key: tuple[str, str], task: asyncio.Task[Snapshot]) -> None:
        if self._flights.get(key) is not None and self._flights[key].task is task:
            del self._flights[key]
        if task.cancelled() or task.exception() is not None:
            return  # retrieved here, so an error no view awaited is not logged as lost
        self._kept[key] = task.result()
        self._kept.move_to_end(key)
        while len(self._kept) > self.capacity:
            self._kept.popitem(last=False)
