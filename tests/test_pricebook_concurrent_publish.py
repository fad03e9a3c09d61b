"""Two publishes of one pricing revision at once, with different prices: one is the revision,
the other is refused as the conflict it is (409 at the API). Checked then inserted, both found
no revision and both inserted, and the "immutable" revision held both sets of prices."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from domain.pricing import Pricebook
from store import pricebook
from store.db import create_engine, session_factory
from store.migrate import upgrade
from tests.conftest import create_database, drop_database
from tests.helpers.deadline import UNBOUNDED, eventually

TENANT = "tenant-race"


def _book(provider: str, model: str) -> Pricebook:
    return Pricebook.model_validate(
        {
            "revision": "2026-12",
            "entries": [
                {
                    "provider": provider,
                    "model": model,
                    "inputUsdPerMtok": "2.5",
                    "outputUsdPerMtok": "10",
                    "effectiveFrom": "2026-12-01",
                }
            ],
        }
    )


async def _publish(sessions: async_sessionmaker[AsyncSession], book: Pricebook) -> bool:
    async with sessions() as session, session.begin():
        return await pricebook.publish(session, TENANT, book)


async def _waiting(sessions: async_sessionmaker[AsyncSession]) -> int:
    async with sessions() as look:
        return int(
            await look.scalar(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND wait_event_type = 'Lock'"
                )
            )
            or 0
        )


async def test_two_publishes_of_one_revision_with_different_prices_leave_one_of_them() -> None:
    # A database of its own: the gate below holds the catalog version row, which every
    # catalog change of the shared test database takes.
    url = await create_database("mr_pricebook_race")
    engine = create_engine(url)
    sessions = session_factory(engine)
    books = [_book("openai", "gpt-4.1"), _book("anthropic", "claude-sonnet")]
    try:
        await asyncio.to_thread(upgrade, url)
        # Another catalog change, its transaction open, holds both publishes where they next
        # need a lock; released once both wait there, they go on together.
        async with sessions() as gate, gate.begin():
            await gate.execute(text("UPDATE catalog_state SET version = version + 1"))
            races = [asyncio.ensure_future(_publish(sessions, book)) for book in books]
            await eventually(lambda: _waiting_both(sessions), timeout=UNBOUNDED)
        outcomes = await asyncio.gather(*races, return_exceptions=True)

        won = [book for book, outcome in zip(books, outcomes, strict=True) if outcome is True]
        refused = [o for o in outcomes if isinstance(o, pricebook.RevisionConflict)]
        assert len(won) == 1 and len(refused) == 1, outcomes
        async with sessions() as session:
            stored = await pricebook.load(session, TENANT, "2026-12")
        assert stored is not None
        assert [(e.provider, e.model) for e in stored.entries] == [
            (e.provider, e.model) for e in won[0].entries
        ]
        assert stored.entries[0].input_usd_per_mtok == Decimal("2.5")
    finally:
        await engine.dispose()
        await drop_database(url)


async def _waiting_both(sessions: async_sessionmaker[AsyncSession]) -> bool:
    return await _waiting(sessions) == 2


async def test_on_sqlite_too_one_of_two_racing_publishes_is_the_revision(tmp_path: Path) -> None:
    """The embedded default: the same UPDATE takes SQLite's write lock before the check. No
    gate (SQLite says nothing of who waits): the event loop interleaves the two, and without
    the lock both checked before either wrote and both were published."""
    url = f"sqlite+aiosqlite:///{tmp_path}/race.db"
    await asyncio.to_thread(upgrade, url)
    engine = create_engine(url)
    sessions = session_factory(engine)
    try:
        books = [_book("openai", "gpt-4.1"), _book("anthropic", "claude-sonnet")]
        outcomes = await asyncio.gather(
            *(_publish(sessions, book) for book in books), return_exceptions=True
        )
        assert outcomes.count(True) == 1, outcomes
        assert sum(isinstance(o, pricebook.RevisionConflict) for o in outcomes) == 1, outcomes
        async with sessions() as session:
            stored = await pricebook.load(session, TENANT, "2026-12")
        assert stored is not None and len(stored.entries) == 1
    finally:
        await engine.dispose()
