"""Receipt rows as the invoke path writes them. The invoke path does not exist yet, so the
reconciler's tests insert receipts directly, with every field a real invocation would fill."""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from sqlalchemy import func
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col, select

from domain.enums import InvocationOutcome, UsageStatus
from store.db import transaction
from store.tables import InvocationReceiptRow, OutboxEventRow


async def add_receipt(
    sessions: async_sessionmaker[AsyncSession],
    *,
    tenant: str,
    deployment_id: str,
    started_at: datetime,
    usage_status: UsageStatus,
    outcome: InvocationOutcome = InvocationOutcome.COMPLETED,
    input_tokens: int | None = None,
    output_tokens: int | None = None,
    cached_input_tokens: int | None = None,
    cache_write_input_tokens: int | None = None,
    estimated_cost_usd: Decimal | None = None,
    provider_request_id: str | None = None,
    pricing_revision: str = "2026-11",
    invocation_id: uuid.UUID | None = None,
    open_: bool = False,
    run_id: uuid.UUID | None = None,
) -> uuid.UUID:
    key = uuid.uuid4().hex
    row = InvocationReceiptRow(
        invocation_id=invocation_id or uuid.uuid4(),
        tenant_id=tenant,
        project_id="proj-ingest",
        run_id=run_id or uuid.uuid4(),
        attempt_id=uuid.uuid4(),
        profile_id="code-agent",
        deployment_id=deployment_id,
        route_plan_id=uuid.uuid4(),
        fallback_used=False,
        request_hash="sha256:" + hashlib.sha256(key.encode()).hexdigest(),
        idempotency_key=key,
        policy_decision_id=uuid.uuid4(),
        outcome=outcome,
        usage_status=usage_status,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cached_input_tokens=cached_input_tokens,
        cache_write_input_tokens=cache_write_input_tokens,
        estimated_cost_usd=estimated_cost_usd,
        pricing_revision=pricing_revision,
        latency_ms=1200,
        time_to_first_token_ms=350,
        started_at=started_at,
        ended_at=None if open_ else started_at + timedelta(seconds=1, milliseconds=200),
        provider_request_id=provider_request_id,
    )
    async with transaction(sessions) as session:
        session.add(row)
    return row.invocation_id


async def receipts(
    sessions: async_sessionmaker[AsyncSession], ids: list[uuid.UUID]
) -> dict[uuid.UUID, InvocationReceiptRow]:
    async with sessions() as session:
        stmt = select(InvocationReceiptRow).where(col(InvocationReceiptRow.invocation_id).in_(ids))
        return {r.invocation_id: r for r in (await session.scalars(stmt)).all()}


async def invoked_events(
    sessions: async_sessionmaker[AsyncSession], tenant: str
) -> list[OutboxEventRow]:
    async with sessions() as session:
        stmt = (
            select(OutboxEventRow)
            .where(col(OutboxEventRow.tenant_id) == tenant)
            .where(col(OutboxEventRow.event_type) == "ModelInvoked")
            .order_by(col(OutboxEventRow.position))
        )
        return list((await session.scalars(stmt)).all())


async def receipt_count(sessions: async_sessionmaker[AsyncSession], tenant: str) -> int:
    """How many receipts the tenant has: a refused request must write none."""
    async with sessions() as session:
        found = await session.scalar(
            select(func.count())
            .select_from(InvocationReceiptRow)
            .where(col(InvocationReceiptRow.tenant_id) == tenant)
        )
    return int(found or 0)


async def all_closed(sessions: async_sessionmaker[AsyncSession], tenant: str) -> bool:
    """Whether every receipt of the tenant is closed (for `eventually`)."""
    async with sessions() as session:
        open_ = await session.scalar(
            select(func.count())
            .select_from(InvocationReceiptRow)
            .where(col(InvocationReceiptRow.tenant_id) == tenant)
            .where(col(InvocationReceiptRow.ended_at).is_(None))
        )
    return open_ == 0


async def run_of(
    sessions: async_sessionmaker[AsyncSession], tenant: str, count: int
) -> tuple[uuid.UUID, list[str]]:
    """A run of `count` closed receipts, two at each start time (their order then by id); the
    run and its receipt ids oldest first, as ListRunReceipts orders them."""
    run_id, base = uuid.uuid4(), datetime(2026, 12, 1, tzinfo=UTC)
    made = []
    for i in range(count):
        started = base + timedelta(milliseconds=i // 2)
        receipt_id = await add_receipt(
            sessions,
            tenant=tenant,
            deployment_id="pages/dep",
            started_at=started,
            usage_status=UsageStatus.REPORTED,
            run_id=run_id,
        )
        made.append((started, receipt_id))
    return run_id, [str(i) for _, i in sorted(made)]
