"""The invoke path's statements on a pool without pre-ping, against a real PostgreSQL restart:
a connection that dropped is retried once on a fresh one (the call goes on), a store that is
gone surfaces at once as an error the API answers with a 503 — on both ways of running them
(straight on asyncpg, as the API does, and through SQLAlchemy Core) — and each step is one
statement, one round trip, in PostgreSQL's own statement log. On SQLite the same calls run on
SQLAlchemy, asked for asyncpg or not."""

from __future__ import annotations

import asyncio
import re
import sqlite3
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from sqlalchemy import event, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlmodel import col

from api.runtime import Runtime
from bench.invoke_server_stats import parse_pg_log, read_from
from bench.local_postgres import LocalPostgres
from core.settings import Settings
from domain.enums import InvocationOutcome
from store.asyncpg_path import APPLICATION_NAME
from store.db import create_engine, session_factory
from store.migrate import upgrade
from store.receipt_statements import Claim, ReceiptStatements
from store.tables import InvocationReceiptRow, OutboxEventRow
from tests.helpers.deadline import eventually
from tests.helpers.invocations import completed, invocation_input
from tests.test_fault_postgres import own_postgres

__all__ = ["own_postgres"]  # the fixture, shared with the stop/start test


@pytest.mark.parametrize("direct", [True, False], ids=["asyncpg", "sqlalchemy"])
async def test_a_postgres_restart_costs_the_hot_path_one_retry_and_an_outage_a_clear_error(
    own_postgres: tuple[LocalPostgres, str], direct: bool
) -> None:
    pg, url = own_postgres
    engine = create_engine(url, pool_size=4, pre_ping=False)
    statements = ReceiptStatements(engine, direct=direct)
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    try:
        # Fill the pool: every one of these connections dies with the restart.
        warm = [invocation_input(tenant) for _ in range(4)]
        assert all(await asyncio.gather(*(statements.claim(d, "sim/a") for d in warm)))
        await asyncio.to_thread(pg.stop, "fast")
        await asyncio.to_thread(pg.restart)

        # After the restart: each step goes through (its dead connection retried once).
        after = [invocation_input(tenant) for _ in range(4)]
        assert all(await asyncio.gather(*(statements.claim(d, "sim/a") for d in after)))
        assert await statements.catalog_version() >= 0
        assert all(
            await asyncio.gather(*(statements.finalize(d, completed(d)) for d in [*warm, *after]))
        )
        # A used key is told by the claim itself; a second close changes nothing.
        assert await statements.claim(after[0], "sim/a") is False
        assert await statements.finalize(after[0], completed(after[0])) is False

        async with session_factory(engine)() as session:
            rows = (
                await session.scalars(
                    select(InvocationReceiptRow).where(
                        col(InvocationReceiptRow.tenant_id) == tenant
                    )
                )
            ).all()
            events = (
                await session.scalars(
                    select(OutboxEventRow).where(col(OutboxEventRow.tenant_id) == tenant)
                )
            ).all()
        assert len(rows) == 8 and all(r.ended_at is not None for r in rows)
        assert all(r.outcome is InvocationOutcome.COMPLETED for r in rows)
        assert sorted(e.aggregate_id for e in events) == sorted(str(r.invocation_id) for r in rows)
        assert {e.event_type for e in events} == {"ModelInvoked"}

        # The store gone: the claim fails promptly (no hang), nothing written.
        await asyncio.to_thread(pg.stop, "fast")
        started = datetime.now(UTC)
        with pytest.raises((DBAPIError, OSError)):
            await statements.claim(invocation_input(tenant), "sim/a")
        assert (datetime.now(UTC) - started).total_seconds() < 30
    finally:
        await statements.aclose()
        await engine.dispose()


async def _sql(url: str, query: str, *args: object) -> object:
    db = make_url(url)
    conn = await asyncpg.connect(host=db.host, port=db.port, user=db.username, database=db.database)
    try:
        return await conn.fetchval(query, *args)
    finally:
        await conn.close()


async def test_on_asyncpg_each_step_is_one_round_trip_in_the_statement_log(
    own_postgres: tuple[LocalPostgres, str],
) -> None:
    """What the benchmark's statement log counts (bench/invoke_server_stats.py), for the path
    the API takes on a catalog snapshot it holds: per invocation one execute each of the claim
    (with its catalog version check) and the finalise — no parse once a connection has prepared
    them, no reset query on release, no BEGIN/COMMIT, no ping."""
    pg, url = own_postgres
    assert pg.log is not None
    # Every statement of this database's new connections is logged (a database setting: it
    # holds from a connection's start, no reload to wait for).
    database = make_url(url).database
    await _sql(url, f'ALTER DATABASE "{database}" SET log_min_duration_statement = 0')
    engine = create_engine(url, pool_size=1, pre_ping=False)
    statements = ReceiptStatements(engine, direct=True)
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    calls = 5
    try:
        version = await statements.catalog_version()
        for _ in range(2):  # the connection opened, each statement prepared on it
            data = invocation_input(tenant)
            assert await statements.claim_at(data, "sim/a", version) is Claim.CLAIMED
            assert await statements.finalize(data, completed(data))
        offset = pg.log.stat().st_size
        for _ in range(calls):
            data = invocation_input(tenant)
            assert await statements.claim_at(data, "sim/a", version) is Claim.CLAIMED
            assert await statements.finalize(data, completed(data))
        # Written by the server before it answered each statement (duration logging).
        text = read_from(pg.log, offset)
    finally:
        await statements.aclose()
        await engine.dispose()
        await _sql(url, f'ALTER DATABASE "{database}" RESET log_min_duration_statement')
    counted = parse_pg_log(text, calls)
    assert counted["kinds"] == {"WITH": 2.0}, counted
    assert counted["per_call"] == 2
    assert re.findall(r"duration: [0-9.]+ ms\s+parse ", text) == []


@pytest.mark.parametrize("direct", [True, False], ids=["asyncpg", "sqlalchemy"])
async def test_a_claim_at_a_catalog_version_writes_only_while_that_version_is_current(
    own_postgres: tuple[LocalPostgres, str], direct: bool
) -> None:
    """The claim of a route planned on a cached catalog: written while the version it was
    planned at is the current one, refused without a row once the catalog moved, and a used
    key told apart from both."""
    _, url = own_postgres
    engine = create_engine(url, pool_size=2, pre_ping=False)
    statements = ReceiptStatements(engine, direct=direct)
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    try:
        version = await statements.catalog_version()
        first, later = invocation_input(tenant), invocation_input(tenant)
        assert await statements.claim_at(first, "sim/a", version) is Claim.CLAIMED
        assert await statements.claim_at(first, "sim/a", version) is Claim.USED
        await _sql(url, "UPDATE catalog_state SET version = version + 1 WHERE id = 1")
        assert await statements.claim_at(later, "sim/a", version) is Claim.STALE
        async with session_factory(engine)() as session:
            assert await session.get(InvocationReceiptRow, later.invocation_id) is None
            row = await session.get(InvocationReceiptRow, first.invocation_id)
        assert row is not None and row.ended_at is None and row.deployment_id == "sim/a"
        assert await statements.claim_at(later, "sim/a", version + 1) is Claim.CLAIMED
        assert await statements.finalize(later, completed(later))
    finally:
        await statements.aclose()
        await engine.dispose()


async def test_the_asyncpg_pool_is_closed_by_the_api_runtime(
    own_postgres: tuple[LocalPostgres, str], settings: Settings
) -> None:
    """The API's invoke path holds its own asyncpg connections (named in pg_stat_activity);
    shutting the API's runtime down closes them."""
    _, url = own_postgres
    runtime = Runtime(settings.model_copy(update={"database_url": url}))
    query = "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND datname = $2"
    database = make_url(url).database
    try:
        data = invocation_input(f"t-{uuid.uuid4().hex[:8]}")
        assert await runtime.statements.catalog_version() >= 0
        assert await runtime.statements.claim(data, "sim/a")
        assert await runtime.statements.finalize(data, completed(data))
        assert await _sql(url, query, APPLICATION_NAME, database) == 1
    finally:
        await runtime.close()
    await eventually(lambda: _zero(url, query, APPLICATION_NAME, database))


async def _zero(url: str, query: str, *args: object) -> bool:
    return await _sql(url, query, *args) == 0


async def test_on_sqlite_the_same_steps_run_on_sqlalchemy(tmp_path: Path) -> None:
    """The embedded default (`make dev`, the README's quick start): asked for asyncpg, the
    statements still run on SQLAlchemy, with the same answers."""
    url = f"sqlite+aiosqlite:///{tmp_path}/hot.db"
    await asyncio.to_thread(upgrade, url)
    engine = create_engine(url, pre_ping=False)
    statements = ReceiptStatements(engine, direct=True)
    tenant = "t-sqlite"
    try:
        data = invocation_input(tenant)
        assert await statements.catalog_version() >= 0
        assert await statements.claim(data, "sim/a")
        assert await statements.claim(data, "sim/a") is False  # a used key
        assert await statements.finalize(data, completed(data))
        assert await statements.finalize(data, completed(data)) is False  # the first close wins
        async with session_factory(engine)() as session:
            row = await session.get(InvocationReceiptRow, data.invocation_id)
            events = (
                await session.scalars(
                    select(OutboxEventRow).where(col(OutboxEventRow.tenant_id) == tenant)
                )
            ).all()
        assert row is not None and row.outcome is InvocationOutcome.COMPLETED
        assert row.ended_at is not None and row.output_tokens == 4
        assert [e.event_type for e in events] == ["ModelInvoked"]
    finally:
        await statements.aclose()
        await engine.dispose()


async def _only_their_own_claim(engine: AsyncEngine, statements: ReceiptStatements) -> None:
    """A denial claims and closes in one transaction, and never closes a key claimed before;
    a workflow's close of the claim made at `claimed_at`, or the sweeper's of the claim it
    listed, never closes another claim."""
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    fresh, busy, late = (invocation_input(tenant) for _ in range(3))
    denied = await statements.deny(fresh, "over-budget")
    assert denied is not None and denied.outcome is InvocationOutcome.DENIED
    at = datetime.now(UTC)
    assert await statements.claim(busy, "sim/a", at)
    # The same key again, over budget: the call in flight keeps its open receipt.
    assert await statements.deny(busy, "over-budget") is None
    # A claim made at `at` is closed by the close of that claim only.
    assert await statements.claim(late, "sim/a", at)
    earlier = at - timedelta(seconds=1)
    assert not await statements.close_claim(tenant, earlier, completed(late))
    assert await statements.close_claim(tenant, at, completed(late))
    # The sweeper closes the claim it listed, not the caller's retry that claimed the key again
    # after that one was undone.
    assert not await statements.sweep(tenant, busy.invocation_id, earlier)
    async with session_factory(engine)() as session:
        rows = {
            r.invocation_id: r
            for r in await session.scalars(
                select(InvocationReceiptRow).where(col(InvocationReceiptRow.tenant_id) == tenant)
            )
        }
        events = (
            await session.scalars(
                select(OutboxEventRow).where(col(OutboxEventRow.tenant_id) == tenant)
            )
        ).all()
    assert rows[fresh.invocation_id].outcome is InvocationOutcome.DENIED
    assert rows[busy.invocation_id].ended_at is None
    assert rows[late.invocation_id].outcome is InvocationOutcome.COMPLETED
    assert sorted(str(e.aggregate_id) for e in events) == sorted(
        str(i) for i in (fresh.invocation_id, late.invocation_id)
    )


async def test_a_denial_or_a_workflows_close_touches_only_its_own_claim_on_postgres(
    own_postgres: tuple[LocalPostgres, str],
) -> None:
    _, url = own_postgres
    engine = create_engine(url, pool_size=2, pre_ping=False)
    statements = ReceiptStatements(engine, direct=True)
    try:
        await _only_their_own_claim(engine, statements)
    finally:
        await statements.aclose()
        await engine.dispose()


async def test_a_denial_or_a_workflows_close_touches_only_its_own_claim_on_sqlite(
    tmp_path: Path,
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path}/own.db"
    await asyncio.to_thread(upgrade, url)
    engine = create_engine(url, pre_ping=False)
    statements = ReceiptStatements(engine, direct=True)
    try:
        await _only_their_own_claim(engine, statements)
    finally:
        await statements.aclose()
        await engine.dispose()


async def test_on_sqlite_a_close_that_loses_the_race_writes_no_events(tmp_path: Path) -> None:
    """SQLite renders no FOR UPDATE: the workflow's close read the receipt open, another
    process (the API) closed it, and the close's update then matched nothing, yet it wrote a
    second ModelInvoked and said it had closed the receipt. `make dev` runs the API and the
    worker as two processes on one file."""
    path = tmp_path / "race.db"
    url = f"sqlite+aiosqlite:///{path}"
    await asyncio.to_thread(upgrade, url)
    engine = create_engine(url, pre_ping=False)
    statements = ReceiptStatements(engine)
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    data, at = invocation_input(tenant), datetime.now(UTC)
    raced: list[bool] = []

    def other_process_closes_first(_c: Any, _cur: Any, statement: str, *_: Any) -> None:
        if statement.startswith("UPDATE invocation_receipts") and not raced:
            raced.append(True)
            with sqlite3.connect(path) as other:  # as the other process would, on its own
                other.execute(
                    "UPDATE invocation_receipts SET ended_at = ?, outcome = 'COMPLETED' "
                    "WHERE invocation_id = ?",
                    (at.isoformat(), data.invocation_id.hex),
                )

    try:
        assert await statements.claim(data, "sim/a", at)
        event.listen(engine.sync_engine, "before_cursor_execute", other_process_closes_first)
        try:
            assert not await statements.close_claim(tenant, at, completed(data))
        finally:
            event.remove(engine.sync_engine, "before_cursor_execute", other_process_closes_first)
        assert raced
        async with session_factory(engine)() as session:
            events = (
                await session.scalars(
                    select(OutboxEventRow).where(col(OutboxEventRow.tenant_id) == tenant)
                )
            ).all()
        assert events == []
    finally:
        await statements.aclose()
        await engine.dispose()
