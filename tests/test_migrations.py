"""One Alembic history that upgrades, downgrades and upgrades again on both engines, and
that builds exactly the schema the tables declare."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlmodel import SQLModel

import store.ops_tables  # (registers its tables on SQLModel.metadata, as store.tables does)
import store.routing_tables
import store.tables
import store.webhook_tables  # noqa: F401
from store.db import create_engine
from store.migrate import downgrade, upgrade
from tests.conftest import create_database, drop_database

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
