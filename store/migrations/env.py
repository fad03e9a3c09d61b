"""Alembic environment: async engines for both PostgreSQL and SQLite, each migration in its own
transaction on both (one interrupted leaves nothing half-done; the index builds outside it are
dropped and built again). On PostgreSQL one run at a time (an advisory lock) and a lock timeout
on its statements (store/migrate.py says why and retries a run that met it)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from alembic import context
from sqlalchemy import event, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlmodel import SQLModel

# Every module that puts tables on SQLModel.metadata: without store.ops_tables, autogenerate
# would have written a drop of the probe, statement and reconciliation tables.
import store.ops_tables
import store.routing_tables
import store.tables
import store.webhook_tables  # noqa: F401
from store.db import create_engine
from store.migrate import LOCK_TIMEOUT_SECONDS, MIGRATION_LOCK_KEY

target_metadata = SQLModel.metadata

log = logging.getLogger("store.migrate")

# How often a run waiting for another tries the migration lock again: a migration run takes
# seconds to minutes, so this adds little to the wait.
_LOCK_POLL_SECONDS = 0.5


def _run(connection: Connection) -> None:
    sqlite = connection.dialect.name == "sqlite"
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=sqlite,
        compare_type=True,
        # As PostgreSQL's, SQLite's DDL is transactional once the engine begins its
        # transactions itself (_sqlite_transactions); Alembic's default for SQLite says not.
        transactional_ddl=True,
        # A migration's locks end with it, and one that failed leaves those before it applied
        # (a retry resumes there): all pending ones in one transaction held every ALTER's
        # ACCESS EXCLUSIVE lock until the last had run, and a failure undid them all.
        transaction_per_migration=True,
    )
    with context.begin_transaction():
        context.run_migrations()


async def _one_runner_at_a_time(connection: AsyncConnection, lock_timeout_ms: int) -> None:
    """Take the migration lock (held by this session until it ends), then bound lock waits.
    The wait for another runner is not bounded: it ends when that run does, and the run that
    waited then reads the version that run left and has nothing to do.

    Polled, not waited for in pg_advisory_lock: a statement waiting holds a snapshot, and the
    other run's CREATE INDEX CONCURRENTLY (0008, 0014, 0015) waits for every older snapshot
    in the database to go. Each waited for the other, and PostgreSQL failed one of them with
    "deadlock detected" (tests/test_migrate_locking.py, three runs on a fresh database)."""
    waiting = False
    while not await connection.scalar(text(f"SELECT pg_try_advisory_lock({MIGRATION_LOCK_KEY})")):
        await connection.commit()  # no snapshot held between tries
        if not waiting:
            log.warning("another migration run holds the migration lock: waiting for it to end")
            waiting = True
        await asyncio.sleep(_LOCK_POLL_SECONDS)
    await connection.execute(text(f"SET lock_timeout = {int(lock_timeout_ms)}"))
    # Session-level settings and lock outlive this transaction; Alembic begins its own.
    await connection.commit()


def _sqlite_transactions(engine: AsyncEngine) -> None:
    """Each migration one transaction on SQLite (SQLAlchemy's recipe for pysqlite and
    aiosqlite, for this engine only). Python's sqlite3 begins a transaction before an INSERT,
    UPDATE or DELETE only: a migration's CREATE, ALTER and DROP each committed alone. One
    interrupted ("database is locked", a killed `make dev`) left those before it applied and
    its version not recorded, and every later run failed: 0017's second ALTER left the first's
    column behind ("duplicate column name"), a batch rebuild its `_alembic_tmp_` table ("table
    already exists").

    BEGIN IMMEDIATE takes the write lock before the migration reads anything (the busy
    timeout waits for it while the service writes): a deferred transaction that read, then
    found another writer had committed since, would fail at its first write without waiting.
    None in an autocommit block (0008, 0014, 0015, 0019): Alembic asks for one where no transaction
    may be open, and each of those index builds can be run again."""

    @event.listens_for(engine.sync_engine, "connect")
    def _no_implicit_begin(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None

    @event.listens_for(engine.sync_engine, "begin")
    def _begin(connection: Connection) -> None:
        if connection.get_execution_options().get("isolation_level") != "AUTOCOMMIT":
            connection.exec_driver_sql("BEGIN IMMEDIATE")


async def _run_async(url: str, lock_timeout_ms: int) -> None:
    engine = create_engine(url)
    if engine.dialect.name == "sqlite":
        _sqlite_transactions(engine)
    try:
        async with engine.connect() as connection:
            if connection.dialect.name == "postgresql":
                await _one_runner_at_a_time(connection, lock_timeout_ms)
            await connection.run_sync(_run)
            await connection.commit()
    finally:
        # Closes the connection, which ends its session and so releases the advisory lock,
        # whether the run succeeded or not.
        await engine.dispose()


def run_migrations_online() -> None:
    url = context.config.get_main_option("sqlalchemy.url")
    assert url, "sqlalchemy.url must be set"
    lock_timeout_ms = context.config.attributes.get(
        "lock_timeout_ms", round(LOCK_TIMEOUT_SECONDS * 1000)
    )
    asyncio.run(_run_async(url, lock_timeout_ms))


if context.is_offline_mode():
    raise SystemExit("offline migrations are not supported; run against a database")
run_migrations_online()
