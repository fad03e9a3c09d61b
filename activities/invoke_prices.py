"""A call's cost as its receipt states it: the answering attempt's tokens at the prices of the
invocation's pricing revision, as of today. Revisions are immutable, so a process keeps each
one it read. One not published yet is read again after `MISSING_SECONDS`: a profile may name a
revision published after it, and kept as missing for the process's life every receipt of it
went without a cost until a restart, while its budgets were priced on the current revision."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from activities.invoke_outcomes import Outcome
from domain.invocation import InvocationInput
from domain.pricing import Pricebook, receipt_cost_usd
from store import pricebook

# How long a revision found missing is taken as missing: one read per revision that often at
# most, against a read on every call of a profile naming it.
MISSING_SECONDS = 30.0


class Prices:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        wait: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`wait` bounds the one read a call's end may make besides its close (its revision's
        pricebook, once per process): `INVOKE_STORE_WAIT_SECONDS`, as the close's own."""
        self._sessions = sessions
        self._wait = wait
        self._clock = clock
        self._books: dict[tuple[str, str], Pricebook | None] = {}
        self._missing_until: dict[tuple[str, str], float] = {}

    async def _book(self, tenant_id: str, revision: str) -> Pricebook | None:
        key = (tenant_id, revision)
        until = self._missing_until.get(key)
        if until is not None and self._clock() >= until:
            del self._missing_until[key], self._books[key]  # not published then: perhaps now
        if key not in self._books:
            # Read before the close, on the main engine, whose statements wait up to
            # `DATABASE_STATEMENT_TIMEOUT_SECONDS` (60 s by default): a database gone silent
            # held the receipt's close and the caller's last byte that long, where the close
            # itself gives up after the invoke path's bound and goes to the workflow. Past the
            # bound the cost is left unknown, as for a pricebook that cannot be read.
            async with asyncio.timeout(self._wait), self._sessions() as session:
                self._books[key] = await pricebook.load(session, tenant_id, revision)
            if self._books[key] is None:
                self._missing_until[key] = self._clock() + MISSING_SECONDS
        return self._books[key]

    async def cost(
        self, data: InvocationInput, provider: str, model: str, result: Outcome
    ) -> Decimal | None:
        """The answering attempt's cost; None when its model has no price in the revision.
        Raises when the pricebook cannot be read (in time)."""
        book = await self._book(data.tenant_id, data.pricing_revision)
        # The price of the day the call was claimed, as its admission priced it and as the
        # reconciler prices its receipt (started_at): a call across midnight into a new price
        # was admitted at one price, recorded at another and reconciled at the first.
        day = (data.claimed_at or datetime.now(UTC)).date()
        price = book.price_for(provider, model, day) if book else None
        if price is None:
            return None
        total = result.input_tokens or 0
        cached = min(result.cached or 0, total)
        return receipt_cost_usd(
            price,
            input_tokens=total,
            output_tokens=result.output_tokens or 0,
            cached_input_tokens=cached,
            cache_write_input_tokens=min(result.cache_written or 0, total - cached),
        )
