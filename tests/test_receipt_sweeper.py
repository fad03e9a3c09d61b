"""The receipt sweeper on the real worker and store: a receipt left open past the invocation
budget with no workflow to close it is closed Failed, usage Unknown, reason `swept`, counted in
`receipts_swept`; a receipt still within its budget, or one
whose InvokeModel workflow still runs, is left alone. Its schedule is created with the others."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col
from temporalio.client import Client

from core import metrics
from core.schedules import SWEEPER, desired_schedules, schedule_id, sweep_input
from core.settings import Settings
from domain.invocation import InvocationInput, Target
from domain.sweep import SweepInput
from store import receipts
from store.db import transaction
from store.receipt_statements import ReceiptStatements
from store.tables import InvocationReceiptRow
from tests.helpers.invocations import invocation_input
from workflows.receipt_sweeper import ReceiptSweeperWorkflow


def _input(tenant: str, key: str) -> InvocationInput:
    target = Target(deployment_id="sw/dep", provider="openai", model="m", endpoint_ref="env:X")
    return invocation_input(tenant, key, profile_id="swept", target=target)


async def _open_receipt(
    sessions: async_sessionmaker[AsyncSession], tenant: str, key: str, age: timedelta
) -> InvocationInput:
    data = _input(tenant, key)
    assert await ReceiptStatements(sessions.kw["bind"]).claim(data, "sw/dep")
    async with transaction(sessions) as session:
        await session.execute(
            update(InvocationReceiptRow)
            .where(col(InvocationReceiptRow.invocation_id) == data.invocation_id)
            .values(started_at=datetime.now(UTC) - age)
        )
    return data


async def _row(
    sessions: async_sessionmaker[AsyncSession], tenant: str, key: str
) -> InvocationReceiptRow:
    async with sessions() as session:
        row = await receipts.by_key(session, tenant, key)
    assert row is not None
    return row


async def test_the_sweeper_closes_a_receipt_left_open_and_leaves_live_ones(
    settings: Settings,
    temporal_client: Client,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    worker: None,
) -> None:
    lost = await _open_receipt(sessions, tenant, "lost", timedelta(hours=1))
    await _open_receipt(sessions, tenant, "recent", timedelta(seconds=5))
    owned = await _open_receipt(sessions, tenant, "owned", timedelta(hours=1))
    # An InvokeModel still running for `owned` (on a queue nobody polls): its workflow will
    # close it, so the sweeper must not.
    running = await temporal_client.start_workflow(
        "InvokeModel",
        owned,
        id=f"invoke/{tenant}/{owned.invocation_id}",
        task_queue=f"unpolled-{uuid.uuid4().hex[:8]}",
    )
    swept_before = metrics.receipts_swept.value({"tenant": tenant})
    try:
        report = await temporal_client.execute_workflow(
            ReceiptSweeperWorkflow.run,
            SweepInput(open_longer_than_seconds=600),
            id=f"sweep-test-{uuid.uuid4().hex[:8]}",
            task_queue=settings.temporal_task_queue,
        )
    finally:
        await running.terminate()

    closed = await _row(sessions, tenant, "lost")
    assert closed.invocation_id == lost.invocation_id
    assert (closed.outcome, closed.usage_status, closed.close_reason) == (
        "Failed",
        "Unknown",
        "swept",
    )
    assert closed.ended_at is not None and closed.input_tokens is None
    assert (await _row(sessions, tenant, "recent")).ended_at is None
    assert (await _row(sessions, tenant, "owned")).ended_at is None
    assert report.closed >= 1 and report.left_to_workflow >= 1
    assert metrics.receipts_swept.value({"tenant": tenant}) == swept_before + 1


def test_the_sweeper_is_scheduled_every_minute_past_the_invocation_budget(
    settings: Settings,
) -> None:
    sweeper = next(
        d for d in desired_schedules(settings) if d.schedule_id == schedule_id(settings, SWEEPER)
    )
    assert sweeper.schedule.spec.cron_expressions == ["* * * * *"]
    budget = settings.default_timeout_seconds + 10 + settings.receipt_sweeper_grace_seconds
    assert sweep_input(settings).open_longer_than_seconds == budget
