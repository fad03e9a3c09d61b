"""Migration 0008 builds its indexes CONCURRENTLY; a build that was interrupted leaves an INVALID
index of the same name behind, and every later run of 0008 failed "relation already exists"
until someone dropped it by hand. Now 0008 drops each first, as 0014 does."""

from __future__ import annotations

import asyncio

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from store.db import create_engine
from store.migrate import code_head, upgrade
from tests.conftest import create_database, drop_database
from tests.helpers.deadline import UNBOUNDED, eventually
from tests.test_migrations import _drift

_BUILD = (
    "CREATE INDEX CONCURRENTLY ix_receipts_tenant_closed ON invocation_receipts"
    " (tenant_id, started_at) WHERE ended_at IS NOT NULL"
)


async def test_an_interrupted_or_hand_made_index_does_not_stop_migration_0008() -> None:
    url = await create_database("mr_migrate_index")
    engine = create_engine(url)
    try:
        await asyncio.to_thread(upgrade, url, "0007")
        await _interrupted_build(engine)
        # The other index of 0008, made by hand on other columns: replaced by 0008's own.
        async with engine.connect() as conn:
            await conn.execute(
                text("CREATE INDEX ix_outbox_deployment_events ON outbox_events (tenant_id)")
            )
            await conn.commit()
            assert await _validity(conn) == {
                "ix_receipts_tenant_closed": False,
                "ix_outbox_deployment_events": True,
            }

        assert await asyncio.to_thread(upgrade, url) is None

        async with engine.connect() as conn:
            assert await _validity(conn) == {
                "ix_receipts_tenant_closed": True,
                "ix_outbox_deployment_events": True,
            }
            version = await conn.scalar(text("SELECT version_num FROM alembic_version"))
        assert version == code_head()
        assert await _drift(url) == []  # both as the tables declare them
    finally:
        await engine.dispose()
        await drop_database(url)


async def _interrupted_build(engine: AsyncEngine) -> None:
    """A CREATE INDEX CONCURRENTLY cancelled while it waits for a writer's transaction to end
    (as a cancelled Job, a lock timeout or a dropped connection would end it): PostgreSQL has
    already committed the index's entry, marked invalid, and leaves it there."""
    async with engine.connect() as writer:
        await writer.execute(text("LOCK TABLE invocation_receipts IN ROW EXCLUSIVE MODE"))
        async with engine.connect() as builder:
            autocommit = await builder.execution_options(isolation_level="AUTOCOMMIT")
            build = asyncio.ensure_future(autocommit.execute(text(_BUILD)))
            async with engine.connect() as watch:
                await eventually(lambda: _cancel_waiting_build(watch), timeout=UNBOUNDED)
            try:
                await asyncio.wait_for(build, UNBOUNDED)
            except DBAPIError as exc:
                assert "canceling statement due to user request" in str(exc)
            else:
                raise AssertionError("the build was not cancelled")
        await writer.rollback()


async def _cancel_waiting_build(watch: AsyncConnection) -> bool:
    cancelled = await watch.scalar(
        text(
            "SELECT bool_or(pg_cancel_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            " AND query LIKE 'CREATE INDEX CONCURRENTLY%'"
        )
    )
    await watch.commit()
    return bool(cancelled)


async def _validity(conn: AsyncConnection) -> dict[str, bool]:
    rows = await conn.execute(
        text(
            "SELECT c.relname, i.indisvalid FROM pg_index i JOIN pg_class c"
            " ON c.oid = i.indexrelid WHERE c.relname IN"
            " ('ix_receipts_tenant_closed', 'ix_outbox_deployment_events')"
        )
    )
    return {name: valid for name, valid in rows}
