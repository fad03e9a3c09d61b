"""Async engine and session factory for PostgreSQL (asyncpg) and SQLite (aiosqlite)."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

# The oldest SQLite the store's statements run on: the claim's INSERT … ON CONFLICT DO NOTHING
# RETURNING and the secret rotation's UPDATE … RETURNING came in 3.35 (March 2021).
MIN_SQLITE = (3, 35, 0)


class SQLiteTooOld(RuntimeError):
    """The SQLite library Python's sqlite3 module is linked against is older than MIN_SQLITE."""


def create_engine(
    url: str,
    *,
    pool_size: int = 10,
    echo: bool = False,
    pre_ping: bool = True,
    statement_timeout: float | None = None,
) -> AsyncEngine:
    """`pre_ping=False` is for the invoke path's own pool (store.receipt_statements), which
    retries a statement on a dropped connection instead of pinging before every checkout.

    `statement_timeout` (PostgreSQL): the longest wait for the answer to any one statement, the
    pre-ping included (asyncpg's `command_timeout`), and for a new connection. Past it the
    statement fails as the store being away (a `TimeoutError`, store/outage.is_outage) and its
    connection is not used again.
    A failover can leave connections open to a host that is gone: unbounded, a statement on one
    waited until TCP gave up, about 15 minutes (tests/test_store_silent.py)."""
    parsed = make_url(url)
    kwargs: dict[str, Any] = {"echo": echo, "pool_pre_ping": pre_ping}
    if parsed.get_backend_name() == "sqlite":
        _require_sqlite(MIN_SQLITE)
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        kwargs["connect_args"] = {"timeout": 30}
    else:
        kwargs["pool_size"] = pool_size
        kwargs["max_overflow"] = pool_size
        if statement_timeout is not None:
            # Connecting is bounded the same: asyncpg's own default is 60 s, and a new
            # connection to a host that is unreachable (a partition, not a restart, which
            # refuses at once) held a refused call's claim release, and its 503, for 62 s
            # (tests/test_fault_temporal_late_start.py).
            kwargs["connect_args"] = {
                "command_timeout": statement_timeout,
                "timeout": statement_timeout,
            }
    engine = create_async_engine(url, **kwargs)
    if parsed.get_backend_name() == "sqlite":
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
    return engine


def _require_sqlite(least: tuple[int, int, int]) -> None:
    """Refused as the engine is made, not at the first statement: on an older library
    `make dev` started, and every invocation answered 500 at its claim."""
    found = sqlite3.sqlite_version_info
    if found < least:
        raise SQLiteTooOld(
            f"SQLite {'.'.join(map(str, found))} is too old: the store needs SQLite "
            f"{'.'.join(map(str, least))} or later (INSERT and UPDATE … RETURNING). It is the "
            "library this Python's sqlite3 module was built with: run model-router on a "
            "Python built with a newer one (those uv installs are: `uv python install`), or "
            "on PostgreSQL (MODEL_ROUTER_DATABASE_URL=postgresql+asyncpg://…)."
        )


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    # WAL lets the API read while the worker writes; foreign keys are off by default in SQLite.
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.close()


def session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False)


@asynccontextmanager
async def transaction(
    factory: async_sessionmaker[AsyncSession],
) -> AsyncIterator[AsyncSession]:
    """One unit of work: commits on success, rolls back on any error, never half-writes."""
    async with factory() as session, session.begin():
        yield session
