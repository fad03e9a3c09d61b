"""Reading receipts for the reconciler and writing what it settled.

The reconciler is a platform job: provider statements cover every tenant that shares a
provider key, so these reads span tenants (the receipts awaiting usage optionally narrowed to
some; the usage already known never is). Each settlement is written under the receipt's own
tenant: the receipt, its reconciliation record and its ModelInvoked correction in one
transaction, guarded so a receipt settles once.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from sqlalchemy import and_, func, not_, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col, select

from domain.enums import UsageStatus
from domain.pricing import Pricebook, receipt_cost_usd
from domain.reconciliation import Settlement
from domain.statements import AWAITING, ReceiptUsage, RequestIdCarrier, usage_corrected_event
from store import pricebook
from store.columns import utcnow
from store.ops_tables import ReceiptReconciliationRow, as_utc
from store.repositories import OutboxRepository
from store.tables import InvocationReceiptRow, ModelDeploymentRow
from store.upsert import upsert

# A receipt joined with its deployment: the provider, model and key statements are kept by.
_ITS_DEPLOYMENT = (col(ModelDeploymentRow.tenant_id) == col(InvocationReceiptRow.tenant_id)) & (
    col(ModelDeploymentRow.deployment_id) == col(InvocationReceiptRow.deployment_id)
)


@dataclass(frozen=True)
class ReceiptInWindow:
    usage: ReceiptUsage
    row: InvocationReceiptRow


async def receipts_in_window(
    session: AsyncSession,
    *,
    start: datetime,
    end: datetime,
    tenant_ids: Sequence[str] | None,
    awaiting_only: bool = False,
) -> list[ReceiptInWindow]:
    """Receipts started in [start, end) with their deployment's provider, model and key."""
    stmt = (
        sa.select(  # five columns: sqlmodel's select types four at most
            InvocationReceiptRow,
            col(ModelDeploymentRow.provider),
            col(ModelDeploymentRow.model),
            col(ModelDeploymentRow.endpoint_ref),
            col(ModelDeploymentRow.context_window_tokens),
        )
        .join(ModelDeploymentRow, _ITS_DEPLOYMENT)
        .where(col(InvocationReceiptRow.started_at) >= start)
        .where(col(InvocationReceiptRow.started_at) < end)
    )
    if awaiting_only:
        stmt = stmt.where(col(InvocationReceiptRow.usage_status).in_(sorted(AWAITING)))
    if tenant_ids is not None:
        stmt = stmt.where(col(InvocationReceiptRow.tenant_id).in_(list(tenant_ids)))
    out = []
    for row, provider, model, key, window in (await session.execute(stmt)).all():
        out.append(
            ReceiptInWindow(
                usage=ReceiptUsage(
                    invocation_id=str(row.invocation_id),
                    tenant_id=row.tenant_id,
                    provider=provider,
                    model=model,
                    key=key,
                    started_at=as_utc(row.started_at),
                    usage_status=row.usage_status,
                    input_tokens=row.input_tokens,
                    output_tokens=row.output_tokens,
                    cached_input_tokens=row.cached_input_tokens,
                    cache_write_input_tokens=row.cache_write_input_tokens,
                    provider_request_id=row.provider_request_id,
                    open=row.ended_at is None,
                    context_window_tokens=window,
                ),
                row=row,
            )
        )
    return out


# Receipts whose usage the rules take as known: what a bucket's total is first reduced by.
_KNOWN = sorted({UsageStatus.REPORTED, UsageStatus.RECONCILED})

# A day's awaiting receipts name at most this many request ids in one IN list per statement
# (the lines' own read bounds them the same way: store/statements.py).
_IDS_PER_READ = 1000


async def request_id_carriers(
    session: AsyncSession,
    *,
    start: datetime,
    end: datetime,
    request_ids: Sequence[str],
    pending: Sequence[str],
) -> list[RequestIdCarrier]:
    """The receipts of every tenant (a provider's line names a receipt of any) started in
    [start, end), besides `pending`, awaiting usage or settled by
    the reconciler, that carry one of `request_ids`: a line naming such an id names them as well
    as a pending receipt (domain/reconciliation.SHARED_ID), though another day's window holds
    them. Read through ix_receipts_usage_status (usage_status, started_at) for those statuses
    alone: no index names a request id, and every status (Reported, nearly all receipts) was a
    week of receipts read per window. A Reported receipt sharing an id is not looked for."""
    r = InvocationReceiptRow
    out: list[RequestIdCarrier] = []
    skip = set(pending)
    ids = sorted(set(request_ids))
    for at in range(0, len(ids), _IDS_PER_READ):
        stmt = (
            sa.select(
                col(ModelDeploymentRow.provider),
                col(r.provider_request_id),
                col(r.tenant_id),
                col(r.invocation_id),
            )
            .join(ModelDeploymentRow, _ITS_DEPLOYMENT)
            .where(col(r.usage_status).in_(sorted({*AWAITING, UsageStatus.RECONCILED})))
            .where(col(r.started_at) >= start)
            .where(col(r.started_at) < end)
            .where(col(r.provider_request_id).in_(ids[at : at + _IDS_PER_READ]))
        )
        out += [
            RequestIdCarrier(provider=p, request_id=i, tenant_id=t)
            for p, i, t, invocation in (await session.execute(stmt)).all()
            if str(invocation) not in skip
        ]
    return out


def _epoch_minute(column: Any, dialect: str) -> Any:
    # The divisor is literal SQL so that GROUP BY repeats the very expression of the SELECT
    # (bound, PostgreSQL sees two parameters and refuses the grouping).
    sixty: Any = sa.literal_column("60")
    if dialect == "sqlite":
        return sa.cast(func.strftime("%s", column), sa.Integer).op("/")(sixty)
    return sa.cast(func.floor(func.extract("epoch", column) / sixty), sa.BigInteger)


async def known_usage_in_window(
    session: AsyncSession, *, start: datetime, end: datetime
) -> list[ReceiptUsage]:
    """The usage already known (Reported or Reconciled) of every tenant's receipts started in
    [start, end), summed per tenant, deployment and minute: all bucket allocation needs of them,
    as buckets are whole minutes (1m, 1h, 1d). Each sum is one ReceiptUsage at the minute's
    start.

    Every tenant's, whatever tenants a run is narrowed to: a provider-wide bucket holds the
    tokens of every tenant on the key, and read for the run's tenants alone, the others' known
    usage counted as unexplained and was charged to the run's receipts.

    Summed in the database because a UTC day holds every receipt of the day: loaded one ORM row
    each (about 5 KB with its ReceiptUsage), a day at 12 calls/s was 5 GB in the worker, and
    the rules compared every bucket with every receipt. Read through ix_receipts_usage_status
    (usage_status, started_at)."""
    r = InvocationReceiptRow
    dialect = session.get_bind().dialect.name
    minute = _epoch_minute(col(r.started_at), dialect)
    keys = (
        col(r.tenant_id),
        col(r.deployment_id),
        col(ModelDeploymentRow.provider),
        col(ModelDeploymentRow.model),
        col(ModelDeploymentRow.endpoint_ref),
        minute,
    )
    stmt = (
        sa.select(
            *keys,
            func.sum(func.coalesce(col(r.input_tokens), 0)),
            func.sum(func.coalesce(col(r.output_tokens), 0)),
            func.sum(func.coalesce(col(r.cached_input_tokens), 0)),
            # domain.reconciliation.known_writes: a receipt from before its writes were kept
            # counts its whole uncached input as writes it may hold.
            func.sum(
                func.coalesce(
                    col(r.cache_write_input_tokens),
                    func.coalesce(col(r.input_tokens), 0)
                    - func.coalesce(col(r.cached_input_tokens), 0),
                )
            ),
        )
        .join(ModelDeploymentRow, _ITS_DEPLOYMENT)
        .where(col(r.usage_status).in_(_KNOWN))
        .where(col(r.started_at) >= start)
        .where(col(r.started_at) < end)
        .group_by(*keys)
    )
    out = []
    for tenant, deployment, provider, model, key, at, inp, outp, cached, written in (
        await session.execute(stmt)
    ).all():
        began = datetime.fromtimestamp(int(at) * 60, UTC)
        out.append(
            ReceiptUsage(
                invocation_id=f"known:{tenant}:{deployment}:{began.isoformat()}",
                tenant_id=tenant,
                provider=provider,
                model=model,
                key=key,
                started_at=began,
                usage_status=UsageStatus.REPORTED,
                input_tokens=int(inp),
                output_tokens=int(outp),
                cached_input_tokens=int(cached),
                cache_write_input_tokens=int(written),
            )
        )
    return out


class Pricing:
    """Pricebook revisions by (tenant, revision), loaded once per reconciliation pass."""

    def __init__(self) -> None:
        self._books: dict[tuple[str, str], Pricebook | None] = {}

    async def cost(
        self, session: AsyncSession, receipt: ReceiptInWindow, settlement: Settlement
    ) -> Decimal | None:
        row = receipt.row
        key = (row.tenant_id, row.pricing_revision)
        if key not in self._books:
            self._books[key] = await pricebook.load(session, *key)
        book = self._books[key]
        price = (
            book.price_for(receipt.usage.provider, receipt.usage.model, row.started_at.date())
            if book
            else None
        )
        if price is None:
            return None
        return receipt_cost_usd(
            price,
            input_tokens=settlement.input_tokens,
            output_tokens=settlement.output_tokens,
            cached_input_tokens=settlement.cached_input_tokens,
            cache_write_input_tokens=settlement.cache_write_input_tokens,
        )


async def settle(
    session: AsyncSession,
    receipt: ReceiptInWindow,
    settlement: Settlement,
    cost: Decimal | None,
) -> bool:
    """Writes one settlement; False when the receipt was settled meanwhile (nothing written)."""
    row = receipt.row
    result = await session.execute(
        update(InvocationReceiptRow)
        .where(col(InvocationReceiptRow.invocation_id) == row.invocation_id)
        .where(col(InvocationReceiptRow.usage_status).in_(sorted(AWAITING)))
        # Closed: an open receipt's close would write over it (domain/reconciliation.py).
        .where(col(InvocationReceiptRow.ended_at).is_not(None))
        .values(
            usage_status=UsageStatus.RECONCILED,
            input_tokens=settlement.input_tokens,
            output_tokens=settlement.output_tokens,
            cached_input_tokens=settlement.cached_input_tokens,
            cache_write_input_tokens=settlement.cache_write_input_tokens,
            estimated_cost_usd=cost,
            statement_ref=settlement.statement_ref,
        )
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        return False
    await upsert(
        session,
        ReceiptReconciliationRow,
        [
            {
                "tenant_id": row.tenant_id,
                "invocation_id": row.invocation_id,
                "statement_ref": settlement.statement_ref,
                "rule": settlement.rule.value,
                "previous_usage_status": row.usage_status.value,
                "previous_input_tokens": row.input_tokens,
                "previous_output_tokens": row.output_tokens,
                "input_tokens": settlement.input_tokens,
                "output_tokens": settlement.output_tokens,
                "cached_input_tokens": settlement.cached_input_tokens,
                "cache_write_input_tokens": settlement.cache_write_input_tokens,
                "estimated_cost_usd": cost,
                "reconciled_at": utcnow(),
            }
        ],
        conflict=("invocation_id", "statement_ref"),
    )
    OutboxRepository(session, row.tenant_id).append(
        **usage_corrected_event(
            row.model_dump(),
            input_tokens=settlement.input_tokens,
            output_tokens=settlement.output_tokens,
            estimated_cost_usd=cost,
        )
    )
    return True


def sent_nothing() -> Any:
    """domain.statements.sent_nothing in SQL: the receipt records that no provider saw the
    request (Estimated at exactly zero tokens)."""
    r = InvocationReceiptRow
    return and_(
        col(r.usage_status) == UsageStatus.ESTIMATED,
        # NULL is not zero (an unknown count awaits), and NOT over NULL would drop the row.
        func.coalesce(col(r.input_tokens), -1) == 0,
        func.coalesce(col(r.output_tokens), -1) == 0,
        func.coalesce(col(r.cached_input_tokens), 0) == 0,
    )


async def awaiting_by_provider(session: AsyncSession, lookback_hours: float) -> dict[str, int]:
    """Closed receipts whose usage is Unknown or Estimated, started within the reconciler's
    lookback, per provider: the usage_unknown gauge. A receipt of a call that reached no
    provider awaits nothing (domain.statements.sent_nothing, here in SQL): counted, denials
    alone made the gauge grow for ever. Nor does one past the lookback, which no run settles
    any more: counted, every such receipt stayed in the gauge for good, and an alert on it
    meant nothing (read through ix_receipts_usage_status, a range of it, not all of it)."""
    since = utcnow() - timedelta(hours=lookback_hours)
    stmt = (
        select(ModelDeploymentRow.provider, func.count())
        .select_from(InvocationReceiptRow)
        .join(ModelDeploymentRow, _ITS_DEPLOYMENT)
        .where(col(InvocationReceiptRow.usage_status).in_(sorted(AWAITING)))
        .where(col(InvocationReceiptRow.started_at) >= since)
        # A call under way is claimed Unknown: counted, the gauge rose with every call in
        # flight (about 200 at 100 calls/s of 2 s each), and an alert on it fired under
        # ordinary load. Open ones the sweeper closes are counted from then on.
        .where(col(InvocationReceiptRow.ended_at).is_not(None))
        .where(not_(sent_nothing()))
        .group_by(ModelDeploymentRow.provider)
    )
    counts: dict[str, int] = defaultdict(int)
    for provider, count in (await session.execute(stmt)).all():
        counts[provider] += int(count)
    return dict(counts)
