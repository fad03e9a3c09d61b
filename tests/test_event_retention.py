"""A run's events past their retention are deleted, oldest first, a batch at a time, but for
those an active webhook subscription of their tenant has not delivered yet; catalog events
(the console's history of each deployment and profile) are kept. Before, the outbox grew by
some 4 million rows a day at 50 calls/s, for ever."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col, select
from temporalio.client import Client

from core.schedules import sweep_input
from core.settings import Settings
from domain.sweep import SweepInput
from store.db import create_engine, transaction
from store.event_retention import prune_run_events
from store.migrate import upgrade
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
