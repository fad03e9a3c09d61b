"""A run's events past their retention are deleted, oldest first, a batch at a time, but for
those an active webhook subscription of their tenant has not delivered yet; catalog events
(the console's history of each deployment and profile) are kept. Before, the outbox grew by
some 4 million rows a day at 50 calls/s, for ever."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col, select
from temporalio.client import Client

from core.schedules import sweep_input
from core.settings import Settings
from domain.sweep import SweepInput
from store.db import create_engine, session_factory, transaction
from store.event_retention import prune_run_events
from store.migrate import upgrade
from store.repositories import feed_end
from store.tables import OutboxEventRow
from store.webhook_tables import WebhookSubscriptionRow
from tests.conftest import create_database, drop_database
from tests.helpers.plans import plans
from workflows.receipt_sweeper import ReceiptSweeperWorkflow

NOW = datetime.now(UTC)
OLD = NOW - timedelta(days=40)


def _event(tenant: str, event_type: str, aggregate: str, at: datetime) -> OutboxEventRow:
    kind = "ModelDeployment" if event_type == "DeploymentStateChanged" else "Invocation"
    return OutboxEventRow(
        tenant_id=tenant,
        event_type=event_type,
        topic="t",
        aggregate_type=kind,
        aggregate_id=aggregate,
        payload={},
        occurred_at=at,
    )


async def test_old_run_events_go_unless_a_subscription_still_owes_them(
    store: async_sessionmaker[AsyncSession], tenant: str
) -> None:
    """Held back only by a subscription that takes the event: every type, or a list naming
    its type. One taking only catalog events, failing for good, kept its tenant's run events
    for ever. On PostgreSQL and SQLite alike."""
    held, free = f"{tenant}-held", f"{tenant}-free"
    named, catalog = f"{tenant}-named", f"{tenant}-catalog"
    async with transaction(store) as session:
        rows = {
            "old-invoked": _event(free, "ModelInvoked", "a", OLD),
            "old-plan": _event(free, "RoutePlanResolved", "b", OLD),
            "old-deployment": _event(free, "DeploymentStateChanged", "d", OLD),
            "new-invoked": _event(free, "ModelInvoked", "c", NOW),
            "owed": _event(held, "ModelInvoked", "e", OLD),
            "owed-to-a-list": _event(named, "ModelFallbackUsed", "f", OLD),
            "not-on-the-list": _event(named, "ModelInvoked", "h", OLD),
            "not-wanted": _event(catalog, "ModelInvoked", "g", OLD),
        }
        session.add_all(rows.values())
        await session.flush()
        # Each subscriber is behind its tenant's event.
        for owner, types, row in (
            (held, [], rows["owed"]),
            (named, ["DeploymentStateChanged", "ModelFallbackUsed"], rows["owed-to-a-list"]),
            (catalog, ["DeploymentStateChanged", "ModelProfileActivated"], rows["not-wanted"]),
        ):
            session.add(
                WebhookSubscriptionRow(
                    tenant_id=owner,
                    url="https://example.com/hook",
                    signing_secret="s",
                    event_types=types,
                    delivered_position=int(row.position or 0) - 1,
                )
            )
    ids = {name: row.event_id for name, row in rows.items()}
    async with transaction(store) as session:
        assert await prune_run_events(session, NOW - timedelta(days=30), limit=1) == 1
        await prune_run_events(session, NOW - timedelta(days=30), limit=1000)
    async with store() as session:
        left = set(
            (
                await session.scalars(
                    select(OutboxEventRow.event_id).where(
                        col(OutboxEventRow.tenant_id).in_([held, free, named, catalog])
                    )
                )
            ).all()
        )
    assert left == {ids["old-deployment"], ids["new-invoked"], ids["owed"], ids["owed-to-a-list"]}


def test_the_sweepers_schedule_carries_the_retention(settings: Settings) -> None:
    assert sweep_input(settings).run_event_retention_days == 30
    off = settings.model_copy(update={"run_event_retention_days": 0})
    assert sweep_input(off).run_event_retention_days is None


async def test_the_sweeper_prunes_as_it_runs(
    settings: Settings,
    temporal_client: Client,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    worker: None,
) -> None:
    async with transaction(sessions) as session:
        old = _event(tenant, "ModelInvoked", "z", OLD)
        session.add(old)
    report = await temporal_client.execute_workflow(
        ReceiptSweeperWorkflow.run,
        SweepInput(open_longer_than_seconds=600, run_event_retention_days=30),
        id=f"prune-test-{uuid.uuid4().hex[:8]}",
        task_queue=settings.temporal_task_queue,
    )
    assert report.events_pruned >= 1
    async with sessions() as session:
        found = await session.scalar(
            select(OutboxEventRow.event_id).where(col(OutboxEventRow.event_id) == old.event_id)
        )
    assert found is None


async def test_the_prune_reads_run_events_by_age_not_the_whole_outbox() -> None:
    """In position order only the primary key served the prune: with fewer expired events
    than a batch (every minute at a steady rate), PostgreSQL walked the whole outbox looking
    for more. Its statement, explained with sequential scans priced out, reads
    ix_outbox_run_events_age (migration 0014) in its order. On a database of its own, freshly
    migrated and analyzed: the plan depends on nothing other tests wrote."""
    url = await create_database("mr_prune")
    try:
        await asyncio.to_thread(upgrade, url)
        engine = create_engine(url)
        async with engine.begin() as conn:  # committed: the statistics are transactional
            await conn.exec_driver_sql("ANALYZE outbox_events")
        await engine.dispose()
        [plan] = await plans(url, lambda s: prune_run_events(s, OLD, 5000), ("DELETE",))
    finally:
        await drop_database(url)
    # Read in the index's order, the batch's limit stops the scan: no sort of every expired
    # event, and no walk of the primary key (the delete itself finds each row by it).
    assert "ix_outbox_run_events_age" in plan and "Sort" not in plan, plan
    assert "outbox_events_pkey on outbox_events_1" not in plan, plan


async def test_a_position_the_prune_freed_is_never_taken_again(
    store: async_sessionmaker[AsyncSession], tenant: str
) -> None:
    """SQLite gave a new row the largest rowid present plus one: with the newest event pruned,
    the next one took its position again, at or below a subscriber's cursor, and was never
    delivered. AUTOINCREMENT (migration 0018) hands every position out once; PostgreSQL's
    sequence always did."""
    async with transaction(store) as session:
        newest = _event(tenant, "ModelInvoked", "p", OLD)
        session.add(newest)
    async with store() as session:
        highest = int(await session.scalar(sa.select(sa.func.max(OutboxEventRow.position))) or 0)
    assert newest.position == highest
    async with transaction(store) as session:
        await prune_run_events(session, NOW - timedelta(days=30), limit=1000)
    async with transaction(store) as session:
        after = _event(tenant, "ModelInvoked", "q", NOW)
        session.add(after)
    assert int(after.position or 0) > highest


async def test_the_feed_ends_no_earlier_than_a_cursor_the_prune_left_behind(
    store: async_sessionmaker[AsyncSession], tenant: str
) -> None:
    """Pruned of its newest events, the feed still ends at a subscriber's cursor past them: a
    subscription created again from it (as the README says to resume) was refused as past the
    end of the feed."""
    async with transaction(store) as session:
        newest = _event(tenant, "ModelInvoked", "p", OLD)
        session.add(newest)
    cursor = int(newest.position or 0)
    async with transaction(store) as session:
        session.add(
            WebhookSubscriptionRow(
                tenant_id=tenant,
                url="https://example.com/hook",
                signing_secret=None,
                event_types=[],
                delivered_position=cursor,
                active=False,
            )
        )
    async with transaction(store) as session:
        await prune_run_events(session, NOW - timedelta(days=30), limit=1000)
    async with store() as session:
        assert await feed_end(session) >= cursor


async def test_the_sqlite_outbox_rebuilt_keeps_its_rows_and_indexes(tmp_path: Path) -> None:
    """Migration 0018 rebuilds SQLite's outbox with AUTOINCREMENT: every row and index kept,
    and the next position past every cursor, as rows pruned before it may have stood above
    those left."""
    url = f"sqlite+aiosqlite:///{tmp_path}/outbox.db"
    await asyncio.to_thread(upgrade, url, "0017")
    engine = create_engine(url)
    try:
        async with engine.begin() as conn:
            for n in (1, 2, 3):
                await conn.execute(
                    sa.insert(OutboxEventRow.__table__).values(  # type: ignore[attr-defined]
                        event_id=uuid.uuid4(),
                        tenant_id="t",
                        event_type="ModelInvoked",
                        topic="t",
                        aggregate_type="Invocation",
                        aggregate_id=str(n),
                        payload={},
                        occurred_at=OLD,
                    )
                )
            # The newest pruned before the upgrade: a subscriber had delivered it.
            await conn.execute(sa.text("DELETE FROM outbox_events WHERE position = 3"))
            await conn.execute(
                sa.text(
                    "INSERT INTO webhook_subscriptions (subscription_id, tenant_id, url,"
                    " signing_secret, event_types, delivered_position, active, created_at,"
                    " failed_attempts) VALUES ('00000000000000000000000000000001', 't',"
                    " 'https://example.com/hook', 's', '[]', 3, 1, '2026-01-01', 0)"
                )
            )
        indexes = "SELECT name, sql FROM sqlite_master WHERE type = 'index'"
        indexes += " AND tbl_name = 'outbox_events' ORDER BY name"
        async with engine.connect() as conn:
            before = (await conn.execute(sa.text(indexes))).all()
        # The rebuild's own indexes kept: 0019 adds an outbox index of its own.
        await asyncio.to_thread(upgrade, url, "0018")
        async with engine.connect() as conn:
            assert (await conn.execute(sa.text(indexes))).all() == before
        async with transaction(session_factory(engine)) as session:
            added = _event("t", "ModelInvoked", "4", NOW)
            session.add(added)
        async with engine.connect() as conn:
            positions = (
                await conn.scalars(sa.text("SELECT position FROM outbox_events ORDER BY 1"))
            ).all()
        assert positions == [1, 2, int(added.position or 0)] and positions[-1] > 3
    finally:
        await engine.dispose()
