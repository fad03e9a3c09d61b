"""The reconciler's known usage, summed in the database per tenant, deployment and minute, on
both engines: the same shares as the receipts one by one, without loading the day; and every
tenant's, whatever tenants a run is narrowed to."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.testing import ActivityEnvironment

from activities.reconciliation import ReconciliationActivities
from activities.reconciliation_types import WindowInput
from core.settings import Settings
from domain.enums import DeploymentState, PrivacyClass, UsageStatus
from domain.reconciliation import plan
from domain.statements import ReceiptUsage, StatementLine
from providers.secrets import default_broker
from store import reconciliation, statements
from store.db import transaction
from store.tables import ModelDeploymentRow
from tests.helpers.receipts import add_receipt, receipts

HOUR = datetime(2026, 11, 20, 10, tzinfo=UTC)


async def _deployment(
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    dep: str,
    model: str = "gpt-4o",
    key: str = "env:OPENAI_KEY_A",
) -> None:
    async with transaction(sessions) as session:
        session.add(
            ModelDeploymentRow(
                tenant_id=tenant,
                deployment_id=dep,
                provider="openai",
                model=model,
                region="eu",
                privacy_class=PrivacyClass.EXTERNAL,
                endpoint_ref=key,
                state=DeploymentState.APPROVED,
            )
        )


async def test_known_usage_is_summed_per_deployment_and_minute_and_shares_out_the_same(
    store: async_sessionmaker[AsyncSession],
) -> None:
    tenant = f"tenant-{uuid.uuid4().hex[:8]}"
    await _deployment(store, tenant, "a")
    await _deployment(store, tenant, "b")
    known = [  # (deployment, started at, status, input, output, cached, cache writes)
        ("a", HOUR + timedelta(minutes=5, seconds=1), UsageStatus.REPORTED, 100, 10, 5, 20),
        ("a", HOUR + timedelta(minutes=5, seconds=59.9), UsageStatus.RECONCILED, 50, 5, None, 3),
        ("a", HOUR + timedelta(minutes=6), UsageStatus.REPORTED, 7, 1, 0, None),
        ("b", HOUR + timedelta(minutes=5, seconds=30), UsageStatus.REPORTED, 1000, 100, 0, 0),
        ("a", HOUR + timedelta(hours=1), UsageStatus.REPORTED, 9, 9, 0, 9),  # past the window
    ]
    for dep, at, status, inp, out, cached, written in known:
        await add_receipt(
            store,
            tenant=tenant,
            deployment_id=dep,
            started_at=at,
            usage_status=status,
            input_tokens=inp,
            output_tokens=out,
            cached_input_tokens=cached,
            cache_write_input_tokens=written,
        )
    unknown = await add_receipt(
        store,
        tenant=tenant,
        deployment_id="a",
        started_at=HOUR + timedelta(minutes=30),
        usage_status=UsageStatus.UNKNOWN,
    )
    async with store() as session:
        sums = [
            u
            for u in await reconciliation.known_usage_in_window(
                session, start=HOUR, end=HOUR + timedelta(hours=1)
            )
            if u.tenant_id == tenant  # every tenant's: other tests' receipts are there too
        ]
        pending = await reconciliation.receipts_in_window(
            session,
            start=HOUR,
            end=HOUR + timedelta(hours=1),
            tenant_ids=[tenant],
            awaiting_only=True,
        )
    got = {
        (u.invocation_id.split(":")[2], u.started_at): (
            u.input_tokens,
            u.output_tokens,
            u.cached_input_tokens,
            u.cache_write_input_tokens,
        )
        for u in sums
    }
    assert got == {
        ("a", HOUR + timedelta(minutes=5)): (150, 15, 5, 23),
        # Writes not kept (closed before migration 0017): all its uncached input may be.
        ("a", HOUR + timedelta(minutes=6)): (7, 1, 0, 7),
        ("b", HOUR + timedelta(minutes=5)): (1000, 100, 0, 0),
    }
    assert {(u.provider, u.model, u.key, u.tenant_id) for u in sums} == {
        ("openai", "gpt-4o", "env:OPENAI_KEY_A", tenant)
    }
    assert [r.usage.invocation_id for r in pending] == [str(unknown)]

    # The hour's bucket: 2,000 input and 200 output tokens, of which the sums explain 1,157 and
    # 116, and 100 cache writes, of which they explain 30; the Unknown receipt gets the rest,
    # exactly as with the receipts one by one.
    line = StatementLine(
        statement_ref="openai-usage/10h",
        source="openai-usage",
        provider="openai",
        model="gpt-4o-2024-08-06",
        key="env:OPENAI_KEY_A",
        bucket_start=HOUR,
        bucket_end=HOUR + timedelta(hours=1),
        input_tokens=2000,
        output_tokens=200,
        cache_write_input_tokens=100,
    )
    one_by_one = [
        ReceiptUsage(
            invocation_id=f"r{i}",
            tenant_id=tenant,
            provider="openai",
            model="gpt-4o",
            key="env:OPENAI_KEY_A",
            started_at=at,
            usage_status=status,
            input_tokens=inp,
            output_tokens=out,
            cached_input_tokens=cached,
            cache_write_input_tokens=written,
        )
        for i, (_, at, status, inp, out, cached, written) in enumerate(known)
    ]
    summed = plan([line], [*(r.usage for r in pending), *sums]).settlements
    each = plan([line], [*(r.usage for r in pending), *one_by_one]).settlements
    assert summed == each
    assert [(s.input_tokens, s.output_tokens, s.cache_write_input_tokens) for s in summed] == [
        (843, 84, 70)
    ]


async def test_a_run_narrowed_to_some_tenants_still_counts_every_tenants_known_usage(
    store: async_sessionmaker[AsyncSession], settings: Settings
) -> None:
    """A provider-wide bucket holds every tenant's tokens on the key. Read for the run's tenants
    alone, another tenant's known usage was unexplained, and charged to the run's receipts."""
    ours, theirs = (f"tenant-{uuid.uuid4().hex[:8]}" for _ in range(2))
    model, key = f"gpt-kn-{uuid.uuid4().hex[:8]}", f"env:KEY_{uuid.uuid4().hex[:8]}"
    for tenant in (ours, theirs):
        await _deployment(store, tenant, "shared", model=model, key=key)
    await add_receipt(
        store,
        tenant=theirs,
        deployment_id="shared",
        started_at=HOUR + timedelta(minutes=10),
        usage_status=UsageStatus.REPORTED,
        input_tokens=1000,
        output_tokens=100,
    )
    waiting = await add_receipt(
        store,
        tenant=ours,
        deployment_id="shared",
        started_at=HOUR + timedelta(minutes=20),
        usage_status=UsageStatus.UNKNOWN,
    )
    line = StatementLine(
        statement_ref=f"openai-usage/kn-{uuid.uuid4().hex[:8]}",
        source="openai-usage",
        provider="openai",
        model=model,
        key=key,
        bucket_start=HOUR,
        bucket_end=HOUR + timedelta(hours=1),
        input_tokens=1500,
        output_tokens=150,
    )
    async with transaction(store) as session:
        await statements.upsert_lines(session, [line])
    async with httpx.AsyncClient() as unused:  # no statement source: the window reads the store
        acts = ReconciliationActivities(store, settings, default_broker(), unused)
        window = WindowInput(start=HOUR, end=HOUR + timedelta(hours=1), tenant_ids=[ours])
        result = await ActivityEnvironment().run(acts.window, window)
    assert result.settled == 1
    row = (await receipts(store, [waiting]))[waiting]
    assert (row.usage_status, row.input_tokens, row.output_tokens) == (
        UsageStatus.RECONCILED,
        500,
        50,
    )
