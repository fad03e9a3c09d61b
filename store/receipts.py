"""Reads of receipts off the hot path: by idempotency key (a replay, a reused key), the ones
left open (the sweeper), and a closed receipt as a replay's summary. Every write of a receipt
is in `store/receipt_statements.py`."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import and_, or_
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col, select

from domain import receipt_fields
from domain.invocation import InvocationSummary
from store.tables import InvocationReceiptRow


def summary_of(row: InvocationReceiptRow) -> InvocationSummary:
    """A closed receipt as a replay tells it (the one mapping, domain/receipt_fields.py)."""
    return receipt_fields.summary_of(row.model_dump())


async def open_before(
    session: AsyncSession,
    started_before: datetime,
    limit: int,
    after: tuple[datetime, uuid.UUID] | None = None,
) -> list[tuple[str, uuid.UUID, datetime]]:
    """(tenant, invocation, started at) of receipts still open that started before
    `started_before`, the oldest first; past `after` (a page's last start and invocation)."""
    started, invocation = (
        col(InvocationReceiptRow.started_at),
        col(InvocationReceiptRow.invocation_id),
    )
    stmt = (
        select(InvocationReceiptRow.tenant_id, invocation, started)
        .where(col(InvocationReceiptRow.ended_at).is_(None))
        .where(started < started_before)
        .order_by(started, invocation)
        .limit(limit)
    )
    if after is not None:
        stmt = stmt.where(or_(started > after[0], and_(started == after[0], invocation > after[1])))
    return [(t, i, at) for t, i, at in (await session.execute(stmt)).all()]


async def by_key(
    session: AsyncSession, tenant_id: str, idempotency_key: str
) -> InvocationReceiptRow | None:
    stmt = (
        select(InvocationReceiptRow)
        .where(col(InvocationReceiptRow.tenant_id) == tenant_id)
        .where(col(InvocationReceiptRow.idempotency_key) == idempotency_key)
    )
    return (await session.scalars(stmt)).first()
