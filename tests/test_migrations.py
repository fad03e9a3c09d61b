"""One Alembic history that upgrades, downgrades and upgrades again on both engines, and
that builds exactly the schema the tables declare."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import SQLModel

import store.ops_tables  # (registers its tables on SQLModel.metadata, as store.tables does)
import store.routing_tables
import store.tables
import store.webhook_tables  # noqa: F401
from domain.enums import UsageStatus
from store.db import SQLiteTooOld, create_engine, session_factory
from store.migrate import downgrade, upgrade
from store.outbox_horizon import settled_position
from store.repositories import InvocationReceiptRepository
from store.tables import InvocationReceiptRow
from tests.conftest import create_database, drop_database
from tests.helpers.plans import plans
from tests.helpers.receipts import add_receipt

SPEC_TABLES = {
    # table: spec columns that must be present (snake_case of the spec's field names)
    "model_profiles": {
        "profile_id",
        "version",
        "release_id",
        "tenant_id",
        "modality",
        "required_capabilities",
        "privacy_class",
        "latency_class",
        "max_context_tokens",
        "max_output_tokens",
        "allowed_regions",
        "allowed_deployments",
        "fallback_chain",
        "fallback_enabled",
        "embedding_compatibility",
        "price_basis",
    },
    "model_deployments": {
        "deployment_id",
        "tenant_id",
        "provider",
        "model",
        "region",
        "privacy_class",
        "endpoint_ref",
        "compute_pool_id",
        "capability_evidence_ref",
        "license_metadata",
        "state",
        "healthy",
        "version",
    },
    "capability_scores": {"capability", "verdict", "score", "evaluated_at", "suite_version"},
    "route_plans": {
        "route_plan_id",
        "run_id",
        "tenant_id",
        "profile_id",
        "profile_version",
        "policy_revision",
        "candidates",
        "constraints",
        "resolved_at",
    },
    "invocation_receipts": {
        "invocation_id",
        "tenant_id",
        "project_id",
        "run_id",
        "attempt_id",
        "profile_id",
        "deployment_id",
        "route_plan_id",
        "fallback_used",
        "request_hash",
        "idempotency_key",
        "policy_decision_id",
        "outcome",
        "usage_status",
        "input_tokens",
        "output_tokens",
        "estimated_cost_usd",
        "pricing_revision",
        "latency_ms",
        "output_artifact_ref",
        "started_at",
        "ended_at",
    },
    "outbox_events": {"position", "event_id", "tenant_id", "topic", "payload"},
}


async def _schema(url: str) -> tuple[dict[str, set[str]], dict[str, list[tuple[str, ...]]]]:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:

            def inspect(sync_conn: sa.Connection) -> tuple[dict, dict]:
                insp = sa.inspect(sync_conn)
                cols = {t: {c["name"] for c in insp.get_columns(t)} for t in insp.get_table_names()}
                uniques: dict[str, list[tuple[str, ...]]] = {}
                for t in insp.get_table_names():
                    uniques[t] = [
                        tuple(str(c) for c in u["column_names"])
                        for u in insp.get_unique_constraints(t)
                    ]
                    uniques[t] += [
                        tuple(str(c) for c in i["column_names"])
                        for i in insp.get_indexes(t)
                        if i.get("unique")
                    ]
                return cols, uniques

            return await conn.run_sync(inspect)
    finally:
        await engine.dispose()


async def _drift(url: str) -> list[object]:
    """What `alembic revision --autogenerate` would write: the tables as declared against the
    schema the migrations built. Drift here once meant integer-bound keys on BIGINT columns
    (the outbox's cursor failed past 2**31 - 1) and two indexes the tables did not know."""
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:

            def compare(sync_conn: sa.Connection) -> list[object]:
                context = MigrationContext.configure(sync_conn, opts={"compare_type": True})
                return list(compare_metadata(context, SQLModel.metadata))

            return await conn.run_sync(compare)
    finally:
        await engine.dispose()


async def _round_trip(url: str) -> None:
    await asyncio.to_thread(upgrade, url)
    cols, uniques = await _schema(url)
    for table, expected in SPEC_TABLES.items():
        assert expected <= cols[table], f"{table} lacks {expected - cols[table]}"
    assert ("tenant_id", "run_id", "profile_id") in uniques["route_plans"]
    assert ("tenant_id", "idempotency_key") in uniques["invocation_receipts"]
    assert {"buffered", "provider_attempt"} <= cols["invocation_receipts"]  # 0007, issue 20

    await asyncio.to_thread(downgrade, url, "base")
    cols, _ = await _schema(url)
    assert set(cols) <= {"alembic_version"}

    await asyncio.to_thread(upgrade, url)
    cols, _ = await _schema(url)
    assert set(SPEC_TABLES) <= set(cols)
    assert await _drift(url) == []


async def test_migrations_round_trip_on_sqlite(tmp_path: Path) -> None:
    await _round_trip(f"sqlite+aiosqlite:///{tmp_path}/rt.db")


async def test_migrations_round_trip_on_postgresql() -> None:
    url = await create_database("mr_migrate")
    try:
        await _round_trip(url)
    finally:
        await drop_database(url)


def test_alembics_environment_sees_every_table_module() -> None:
    """Autogenerate compares the migrations with what env.py imported: a table module it left
    out (store.ops_tables was) reads as tables to drop. This test module imports them all
    itself, which hid the gap from the drift check above."""
    store = Path(__file__).parents[1] / "store"
    env = (store / "migrations" / "env.py").read_text()
    modules = {f"store.{p.stem}" for p in store.glob("*.py") if "table=True" in p.read_text()}
    imported = set(re.findall(r"^import (store\.\w+)", env, re.MULTILINE))
    assert modules and modules - imported == set()


async def test_subscriptions_ended_before_0018_keep_no_secret(tmp_path: Path) -> None:
    """Migration 0018 lets an ended subscription's secret be NULL and clears those already
    ended (deleted, or their receiver gone): nothing signs for them again. Active ones keep
    theirs."""
    url = f"sqlite+aiosqlite:///{tmp_path}/secrets.db"
    await asyncio.to_thread(upgrade, url, "0017")
    engine = create_engine(url)
    try:
        async with engine.begin() as conn:
            for sub, active in (("1", 1), ("2", 0)):
                await conn.execute(
                    sa.text(
                        "INSERT INTO webhook_subscriptions (subscription_id, tenant_id, url,"
                        " signing_secret, previous_signing_secret, event_types,"
                        " delivered_position, active, created_at, failed_attempts)"
                        " VALUES (:id, 't', 'https://example.com/hook', 'whsec_x', 'whsec_y',"
                        " '[]', 0, :active, '2026-01-01', 0)"
                    ),
                    {"id": sub.rjust(32, "0"), "active": active},
                )
        await asyncio.to_thread(upgrade, url)
        async with engine.connect() as conn:
            secrets = (
                await conn.execute(
                    sa.text(
                        "SELECT active, signing_secret, previous_signing_secret"
                        " FROM webhook_subscriptions ORDER BY subscription_id"
                    )
                )
            ).all()
    finally:
        await engine.dispose()
    assert [tuple(row) for row in secrets] == [(1, "whsec_x", "whsec_y"), (0, None, None)]


async def test_an_sqlite_older_than_3_35_is_refused_as_the_engine_is_made(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The store's statements need SQLite 3.35 (INSERT and UPDATE … RETURNING). On an older
    library (the one this Python's sqlite3 module was built with) `make dev` started, and
    every invocation answered 500 at its claim."""
    url = f"sqlite+aiosqlite:///{tmp_path}/old.db"
    monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 34, 1))
    with pytest.raises(SQLiteTooOld) as refused:
        create_engine(url)
    said = str(refused.value)
    assert "SQLite 3.34.1 is too old" in said and "3.35.0 or later" in said
    assert "Python" in said and "PostgreSQL" in said  # what to do about it
    assert not (tmp_path / "old.db").exists()

    monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 35, 0))
    await create_engine(url).dispose()


async def test_downgrades_on_sqlite_keep_the_outbox_positions_taken(tmp_path: Path) -> None:
    """0018 made SQLite's outbox AUTOINCREMENT, and its downgrade keeps it: the code before it
    takes no position twice either. 0009's downgrade rebuilds the table without a column, and
    the rebuild lost AUTOINCREMENT (SQLAlchemy does not reflect it) and the sequence with it;
    0018 run again after its downgrade counted from the largest position left. Either way, a
    position pruned from the top of the outbox was taken again."""
    url = f"sqlite+aiosqlite:///{tmp_path}/positions.db"
    engine = create_engine(url)

    async def write_event() -> int:
        async with engine.begin() as conn:
            columns = "event_id, tenant_id, event_type, topic, aggregate_type, aggregate_id,"
            await conn.execute(
                sa.text(
                    f"INSERT INTO outbox_events ({columns} payload, occurred_at)"
                    " VALUES (:id, 't', 'ModelInvoked', 't', 'Invocation', 'a', '{}',"
                    " '2026-12-01 00:00:00')"
                ),
                {"id": uuid.uuid4().hex},
            )
            position = int(await conn.scalar(sa.text("SELECT max(position) FROM outbox_events")))
            # The newest pruned (as the retention prune may): nothing is left at or above it.
            await conn.execute(sa.text(f"DELETE FROM outbox_events WHERE position = {position}"))
        return position

    async def autoincrement() -> bool:
        async with engine.connect() as conn:
            created = await conn.scalar(
                sa.text("SELECT sql FROM sqlite_master WHERE name = 'outbox_events'")
            )
        return "AUTOINCREMENT" in str(created)

    try:
        await asyncio.to_thread(upgrade, url)
        taken = [await write_event() for _ in range(3)]
        await engine.dispose()  # no connection open across the migrations' rebuilds
        await asyncio.to_thread(downgrade, url, "0008")
        assert await autoincrement()
        taken.append(await write_event())
        await engine.dispose()
        await asyncio.to_thread(upgrade, url)
        assert await autoincrement()
        taken.append(await write_event())
    finally:
        await engine.dispose()
    assert taken == [1, 2, 3, 4, 5]


async def test_a_page_of_a_runs_receipts_is_read_in_its_order_from_an_index(
    database_url: str,
) -> None:
    """A run's receipts are paged by start, then id (InvocationReceiptRepository.list_for_run,
    the receipts API). The index of a tenant's run gave the rows but not that order: every
    page read and sorted the whole run, quadratic over a 50,000-call agent run's pages.
    Migration 0019's index gives both."""
    run, tenant = uuid.uuid4(), f"t-{uuid.uuid4().hex[:8]}"
    engine = create_engine(database_url)
    try:
        for minute in range(3):
            await add_receipt(
                session_factory(engine),
                tenant=tenant,
                deployment_id="openai/gpt",
                started_at=datetime(2026, 12, 1, 0, minute, tzinfo=UTC),
                usage_status=UsageStatus.ESTIMATED,
                run_id=run,
            )
        async with session_factory(engine)() as session:
            first = await InvocationReceiptRepository(session, tenant).list_for_run(run, limit=2)
    finally:
        await engine.dispose()
    assert len(first) == 2
    for after in (None, first[-1]):

        async def page(s: AsyncSession, after: InvocationReceiptRow | None = after) -> object:
            return await InvocationReceiptRepository(s, tenant).list_for_run(
                run, after=after, limit=2
            )

        found = await plans(database_url, page)
        assert len(found) == 1, found
        assert "ix_receipts_tenant_run_started" in found[0], found[0]
        assert "Sort" not in found[0], found[0]


async def test_the_outbox_horizon_held_back_reads_no_row_written_since() -> None:
    """A writer left open holds the horizon of settled positions (store/outbox_horizon.py) at
    the last row written before it began. The read walked the primary key back from the newest
    position, reading every row written since: an hour of an open psql session at 150 events
    a second, 540,000 rows a reader's poll. Migration 0019's index of the rows by the time
    they were written finds it among a handful."""
    url = await create_database("mr_horizon")
    engine = create_engine(url)
    written_since = 5_000
    try:
        await asyncio.to_thread(upgrade, url)
        columns = "event_id, tenant_id, event_type, topic, aggregate_type, aggregate_id,"
        values = "gen_random_uuid(), 't', 'ModelInvoked', 't', 'Invocation', 'a', '{}', now()"
        async with engine.begin() as conn:
            # Written an hour ago (the time given here, as the database's clock gave it then).
            settled = await conn.scalar(
                sa.text(
                    f"INSERT INTO outbox_events ({columns} payload, occurred_at, inserted_at)"
                    f" VALUES ({values}, now() - interval '1 hour') RETURNING position"
                )
            )
        async with engine.connect() as writer:
            await writer.execute(
                sa.text(
                    f"INSERT INTO outbox_events ({columns} payload, occurred_at) VALUES ({values})"
                )
            )
            async with engine.begin() as conn:
                await conn.execute(
                    sa.text(
                        f"INSERT INTO outbox_events ({columns} payload, occurred_at)"
                        f" SELECT {values} FROM generate_series(1, {written_since})"
                    )
                )
                await conn.execute(sa.text("ANALYZE outbox_events"))
            async with session_factory(engine)() as session:
                assert await settled_position(session) == settled
            rows = await _outbox_rows_read(url, settled_position)
            await writer.rollback()
        assert rows <= 10, rows  # 5,001 before: every row written since, and the settled one
    finally:
        await engine.dispose()
        await drop_database(url)


async def _outbox_rows_read(url: str, read: Any) -> int:
    """The outbox rows `read`'s statements read (returned or passed over), by EXPLAIN ANALYZE."""
    engine = create_engine(url)
    seen: list[tuple[str, Any]] = []

    def capture(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        seen.append((statement, parameters))

    def rows(node: dict[str, Any]) -> int:
        own = 0
        if node.get("Relation Name") == "outbox_events":
            own = node["Actual Rows"] * node["Actual Loops"]
            own += node.get("Rows Removed by Filter", 0) + node.get(
                "Rows Removed by Index Recheck", 0
            )
        return own + sum(rows(child) for child in node.get("Plans", []))

    try:
        sa.event.listen(engine.sync_engine, "before_cursor_execute", capture)
        async with session_factory(engine)() as session:
            await read(session)
        sa.event.remove(engine.sync_engine, "before_cursor_execute", capture)
        total = 0
        async with engine.connect() as conn:
            for statement, parameters in seen:
                explained = await conn.exec_driver_sql(
                    "EXPLAIN (ANALYZE, FORMAT JSON) " + statement, parameters
                )
                plan: Any = explained.scalar()
                total += rows((json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"])
        return total
    finally:
        await engine.dispose()
