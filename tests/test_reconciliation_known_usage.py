"""The reconciler's known usage, summed in the database per tenant, deployment and minute, on
both engines: the same shares as the receipts one by one, without loading the day."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from domain.enums import DeploymentState, PrivacyClass, UsageStatus
from domain.reconciliation import plan
from domain.statements import ReceiptUsage, StatementLine
from store import reconciliation
from store.db import transaction
from store.tables import ModelDeploymentRow
from tests.helpers.receipts import add_receipt

HOUR = datetime(2026, 11, 20, 10, tzinfo=UTC)


async def _deployment(sessions: async_sessionmaker[AsyncSession], tenant: str, dep: str) -> None:
    async with transaction(sessions) as session:
        session.add(
            ModelDeploymentRow(
                tenant_id=tenant,
                deployment_id=dep,
                provider="openai",
                model="gpt-4o",
                region="eu",
                privacy_class=PrivacyClass.EXTERNAL,
                endpoint_ref="env:OPENAI_KEY_A",
                state=DeploymentState.APPROVED,
            )
        )


async def test_known_usage_is_summed_per_deployment_and_minute_and_shares_out_the_same(
    store: async_sessionmaker[AsyncSession],
) -> None:
    tenant = f"tenant-{uuid.uuid4().hex[:8]}"
    await _deployment(store, tenant, "a")
    await _deployment(store, tenant, "b")
    known = [  # (deployment, started at, status, input, output, cached)
        ("a", HOUR + timedelta(minutes=5, seconds=1), UsageStatus.REPORTED, 100, 10, 5),
        ("a", HOUR + timedelta(minutes=5, seconds=59.9), UsageStatus.RECONCILED, 50, 5, None),
        ("a", HOUR + timedelta(minutes=6), UsageStatus.REPORTED, 7, 1, 0),
        ("b", HOUR + timedelta(minutes=5, seconds=30), UsageStatus.REPORTED, 1000, 100, 0),
        ("a", HOUR + timedelta(hours=1), UsageStatus.REPORTED, 9, 9, 0),  # past the window
    ]
    for dep, at, status, inp, out, cached in known:
        await add_receipt(
            store,
            tenant=tenant,
            deployment_id=dep,
            started_at=at,
            usage_status=status,
            input_tokens=inp,
            output_tokens=out,
            cached_input_tokens=cached,
        )
    unknown = await add_receipt(
        store,
        tenant=tenant,
        deployment_id="a",
        started_at=HOUR + timedelta(minutes=30),
        usage_status=UsageStatus.UNKNOWN,
    )
    async with store() as session:
        sums = await reconciliation.known_usage_in_window(
            session, start=HOUR, end=HOUR + timedelta(hours=1), tenant_ids=[tenant]
        )
        pending = await reconciliation.receipts_in_window(
            session,
            start=HOUR,
            end=HOUR + timedelta(hours=1),
            tenant_ids=[tenant],
            awaiting_only=True,
        )
        others = await reconciliation.known_usage_in_window(
            session, start=HOUR, end=HOUR + timedelta(hours=1), tenant_ids=[tenant + "-x"]
        )
    got = {
        (u.invocation_id.split(":")[2], u.started_at): (
            u.input_tokens,
            u.output_tokens,
            u.cached_input_tokens,
        )
        for u in sums
    }
    assert got == {
        ("a", HOUR + timedelta(minutes=5)): (150, 15, 5),
        ("a", HOUR + timedelta(minutes=6)): (7, 1, 0),
        ("b", HOUR + timedelta(minutes=5)): (1000, 100, 0),
    }
    assert {(u.provider, u.model, u.key, u.tenant_id) for u in sums} == {
        ("openai", "gpt-4o", "env:OPENAI_KEY_A", tenant)
    }
    assert others == []
    assert [r.usage.invocation_id for r in pending] == [str(unknown)]

    # The hour's bucket: 2,000 input and 200 output tokens, of which the sums explain 1,157 and
    # 116; the Unknown receipt gets the rest, exactly as with the receipts one by one.
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
        )
        for i, (_, at, status, inp, out, cached) in enumerate(known)
    ]
    summed = plan([line], [*(r.usage for r in pending), *sums]).settlements
    each = plan([line], [*(r.usage for r in pending), *one_by_one]).settlements
    assert summed == each
    assert [(s.input_tokens, s.output_tokens) for s in summed] == [(843, 84)]
