"""The receipt sweeper on the real worker and store: a receipt left open past the invocation
budget with no workflow to close it is closed Failed, usage Unknown, reason `swept`, counted in
`receipts_swept`; a receipt still within its budget, or one
whose InvokeModel workflow still runs, is left alone. One whose workflow was never started (its
API process died between the claim and the start) is closed sooner, past the start's bound.
Its schedule is created with the others."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.testing import ActivityEnvironment

from activities.sweeper import SweeperActivities
from core import metrics
from core.schedules import SWEEPER, desired_schedules, schedule_id, sweep_input
from core.settings import Settings
from domain.invocation import InvocationInput, Target
from domain.sweep import (
    UNSTARTED_MARGIN_SECONDS,
    SweepInput,
    Workflow,
    to_sweep,
    unstarted_bound,
    unstarted_wait,
)
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


async def _its_workflow_unpolled(client: Client, data: InvocationInput) -> WorkflowHandle[Any, Any]:
    """The receipt's InvokeModel started on a queue nobody polls: it runs, and never closes it."""
    return await client.start_workflow(
        "InvokeModel",
        data,
        id=f"invoke/{data.tenant_id}/{data.invocation_id}",
        task_queue=f"unpolled-{uuid.uuid4().hex[:8]}",
    )


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
    running = await _its_workflow_unpolled(temporal_client, owned)
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


async def test_live_receipts_filling_a_batch_do_not_hide_the_abandoned_ones_behind_them(
    settings: Settings,
    temporal_client: Client,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    worker: None,
) -> None:
    # The oldest open receipts are live (their workflows run): with a batch of two they filled
    # every batch, and the abandoned receipt after them stayed open for as long as they ran.
    # Older than any other test's receipts, so that they are the first batch.
    # Their workflows first: another test's sweep never finds them open without one.
    running = [
        await _its_workflow_unpolled(temporal_client, _input(tenant, f"old-live-{n}"))
        for n in range(2)
    ]
    for n in range(2):
        await _open_receipt(sessions, tenant, f"old-live-{n}", timedelta(days=400 + n))
    await _open_receipt(sessions, tenant, "behind-them", timedelta(days=399))
    try:
        report = await temporal_client.execute_workflow(
            ReceiptSweeperWorkflow.run,
            SweepInput(open_longer_than_seconds=600, batch=2),
            id=f"sweep-test-{uuid.uuid4().hex[:8]}",
            task_queue=settings.temporal_task_queue,
        )
    finally:
        for handle in running:
            await handle.terminate()
    assert (await _row(sessions, tenant, "behind-them")).close_reason == "swept"
    for n in range(2):
        assert (await _row(sessions, tenant, f"old-live-{n}")).ended_at is None
    assert report.left_to_workflow >= 2 and report.found >= 3


async def test_a_retried_sweep_goes_on_from_the_page_its_attempt_finished(
    temporal_client: Client,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
) -> None:
    # The attempt before timed out after its first page (the live receipts): the retry starts
    # from its heartbeat's mark, not the first page again, and reaches the receipt behind them.
    running = [
        await _its_workflow_unpolled(temporal_client, _input(tenant, f"mark-live-{n}"))
        for n in range(2)
    ]
    owned = [
        await _open_receipt(sessions, tenant, f"mark-live-{n}", timedelta(days=500 + n))
        for n in range(2)
    ]
    await _open_receipt(sessions, tenant, "mark-behind", timedelta(days=499))
    async with sessions() as session:
        first_page = await receipts.open_before(session, datetime.now(UTC), 2)
    assert {i for _, i, _ in first_page} == {d.invocation_id for d in owned}
    _, last, at = first_page[-1]
    env = ActivityEnvironment(client=temporal_client)
    env.info = dataclasses.replace(env.info, heartbeat_details=[at.isoformat(), str(last)])
    try:
        acts = SweeperActivities(sessions)
        report = await env.run(
            acts.sweep, SweepInput(open_longer_than_seconds=600, batch=2, pages=1)
        )
    finally:
        for handle in running:
            await handle.terminate()
    assert (await _row(sessions, tenant, "mark-behind")).close_reason == "swept"
    assert report.left_to_workflow == 0  # the live receipts' page was not read again


def test_the_sweeper_is_scheduled_every_minute_past_the_invocation_budget(
    settings: Settings,
) -> None:
    sweeper = next(
        d for d in desired_schedules(settings) if d.schedule_id == schedule_id(settings, SWEEPER)
    )
    assert sweeper.schedule.spec.cron_expressions == ["* * * * *"]
    budget = settings.default_timeout_seconds + 10 + settings.receipt_sweeper_grace_seconds
    assert sweep_input(settings).open_longer_than_seconds == budget


async def test_a_receipt_whose_workflow_never_started_is_swept_without_waiting_out_the_budget(
    settings: Settings,
    temporal_client: Client,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    worker: None,
) -> None:
    # Ages between the two bounds (hours, so that no other test's receipt is this old): past
    # the never-started bound, within the budget's.
    never = await _open_receipt(sessions, tenant, "never", timedelta(hours=1))
    young = await _open_receipt(sessions, tenant, "young", timedelta(minutes=10))
    ended = await _open_receipt(sessions, tenant, "ended", timedelta(hours=1))
    # `ended`'s workflow ran and was terminated: something may yet close its receipt (the
    # call it owned), so it waits out the whole budget.
    await (await _its_workflow_unpolled(temporal_client, ended)).terminate()
    await temporal_client.execute_workflow(
        ReceiptSweeperWorkflow.run,
        SweepInput(open_longer_than_seconds=7200, unstarted_longer_than_seconds=1800),
        id=f"sweep-test-{uuid.uuid4().hex[:8]}",
        task_queue=settings.temporal_task_queue,
    )
    swept = await _row(sessions, tenant, "never")
    assert swept.invocation_id == never.invocation_id
    assert (swept.outcome, swept.close_reason) == ("Failed", "swept")
    assert (await _row(sessions, tenant, "young")).ended_at is None, young
    assert (await _row(sessions, tenant, "ended")).ended_at is None


def test_the_sweeper_rule_by_what_became_of_the_workflow() -> None:
    data = SweepInput(open_longer_than_seconds=250, unstarted_longer_than_seconds=30)
    assert data.shortest == 30
    assert not to_sweep(Workflow.RUNNING, 10_000, data)
    assert not to_sweep(Workflow.NEVER_STARTED, 29, data)
    assert to_sweep(Workflow.NEVER_STARTED, 30, data)
    assert not to_sweep(Workflow.ENDED, 249, data)
    assert to_sweep(Workflow.ENDED, 250, data)
    # A schedule made before the never-started bound existed keeps the budget for every case.
    before = SweepInput(open_longer_than_seconds=250)
    assert before.shortest == 250 and not to_sweep(Workflow.NEVER_STARTED, 249, before)


def test_the_never_started_bound_is_the_start_wait_and_its_margin(settings: Settings) -> None:
    bound = unstarted_bound(settings.invoke_start_wait_seconds)
    assert bound == settings.invoke_start_wait_seconds + UNSTARTED_MARGIN_SECONDS
    assert sweep_input(settings).unstarted_longer_than_seconds == bound
    assert bound < sweep_input(settings).open_longer_than_seconds


def test_a_retry_of_a_claim_with_no_workflow_is_told_when_the_sweeper_may_close_it() -> None:
    # Within the start's bound its start may still be under way: nothing to tell yet.
    assert unstarted_wait(4.9, 5.0) is None
    # Past it, the time left to the never-started bound (5 + the margin), then none.
    assert unstarted_wait(5.0, 5.0) == UNSTARTED_MARGIN_SECONDS
    assert unstarted_wait(20.0, 5.0) == unstarted_bound(5.0) - 20.0
    assert unstarted_wait(unstarted_bound(5.0) + 60, 5.0) == 0.0


async def test_a_receipt_whose_workflow_timed_out_is_swept(
    settings: Settings,
    temporal_client: Client,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    worker: None,
) -> None:
    # An InvokeModel past its execution timeout (a day in production, domain/sweep.py
    # `workflow_ceiling_seconds`; a second here) is ended, not running: its receipt is swept.
    wedged = await _open_receipt(sessions, tenant, "wedged", timedelta(hours=1))
    handle = await temporal_client.start_workflow(
        "InvokeModel",
        wedged,
        id=f"invoke/{wedged.tenant_id}/{wedged.invocation_id}",
        task_queue=f"unpolled-{uuid.uuid4().hex[:8]}",
        execution_timeout=timedelta(seconds=1),
    )
    deadline = datetime.now(UTC) + timedelta(seconds=60)
    while (await handle.describe()).status is not WorkflowExecutionStatus.TIMED_OUT:
        assert datetime.now(UTC) < deadline, "the workflow never timed out"
        await asyncio.sleep(0.2)
    await temporal_client.execute_workflow(
        ReceiptSweeperWorkflow.run,
        SweepInput(open_longer_than_seconds=600),
        id=f"sweep-test-{uuid.uuid4().hex[:8]}",
        task_queue=settings.temporal_task_queue,
    )
    swept = await _row(sessions, tenant, "wedged")
    assert (swept.outcome, swept.close_reason) == ("Failed", "swept")
