"""Read-side queries the operator console needs beyond the repositories: the latest probe per
deployment, a deployment's state history, receipts with filters and the backlog of receipts
awaiting reconciliation (the overview's sums are in store/overview_reads.py). Every query is
filtered by the caller's tenant."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import func, literal_column, not_, tuple_
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col, select

from domain.enums import InvocationOutcome, UsageStatus
from domain.statements import AWAITING
from store.ops_tables import ProbeSampleRow, ReceiptReconciliationRow
from store.reconciliation import sent_nothing
from store.tables import (
    InvocationReceiptRow,
    ModelDeploymentRow,
    ModelProfileRow,
    OutboxEventRow,
)

S = TypeVar("S", bound=Any)  # a select of receipts, ORM or Core


async def last_probes(session: AsyncSession, tenant_id: str) -> dict[str, ProbeSampleRow]:
    """deploymentId → its most recent probe sample."""
    newest = (
        select(ProbeSampleRow.deployment_id, func.max(ProbeSampleRow.probed_at).label("at"))
        .where(col(ProbeSampleRow.tenant_id) == tenant_id)
        .group_by(col(ProbeSampleRow.deployment_id))
        .subquery()
    )
    stmt = (
        select(ProbeSampleRow)
        .join(
            newest,
            (col(ProbeSampleRow.deployment_id) == newest.c.deployment_id)
            & (col(ProbeSampleRow.probed_at) == newest.c.at),
        )
        .where(col(ProbeSampleRow.tenant_id) == tenant_id)
    )
    return {r.deployment_id: r for r in (await session.scalars(stmt)).all()}


# The newest events of a deployment's history page: a deployment whose probes flap has
# thousands; the page says when it shows only these.
HISTORY_LIMIT = 200


async def deployment_history(
    session: AsyncSession, tenant_id: str, deployment_id: str, limit: int = HISTORY_LIMIT
) -> Sequence[OutboxEventRow]:
    """The deployment's events, oldest first (state changes and evidence)."""
    stmt = (
        select(OutboxEventRow)
        .where(col(OutboxEventRow.tenant_id) == tenant_id)
        # Inline, not bound: the partial index ix_outbox_deployment_events covers only this
        # type, and the planner matches its predicate against a constant.
        .where(col(OutboxEventRow.aggregate_type) == literal_column("'ModelDeployment'"))
        .where(col(OutboxEventRow.aggregate_id) == deployment_id)
        .order_by(col(OutboxEventRow.position).desc())
        .limit(limit)
    )
    return list(reversed((await session.scalars(stmt)).all()))


async def profile_versions(
    session: AsyncSession, tenant_id: str, profile_id: str
) -> Sequence[ModelProfileRow]:
    stmt = (
        select(ModelProfileRow)
        .where(col(ModelProfileRow.tenant_id) == tenant_id)
        .where(col(ModelProfileRow.profile_id) == profile_id)
        .order_by(col(ModelProfileRow.id))
    )
    return (await session.scalars(stmt)).all()


@dataclass(frozen=True)
class ReceiptFilter:
    outcome: InvocationOutcome | None = None
    usage_status: UsageStatus | None = None
    deployment_id: str | None = None
    profile_id: str | None = None
    run_id: uuid.UUID | None = None
    limit: int = 100
    # The page's start: receipts older than this one (by start, then id), for the page after.
    before: InvocationReceiptRow | None = None


async def receipts(
    session: AsyncSession, tenant_id: str, where: ReceiptFilter
) -> Sequence[InvocationReceiptRow]:
    """The newest `limit` receipts matching (older than `before`), newest first, and one more
    when there are more: the page's caller tells an older page by it."""
    stmt = select(InvocationReceiptRow).where(col(InvocationReceiptRow.tenant_id) == tenant_id)
    if where.outcome is not None or where.usage_status is not None:
        # An open receipt's outcome and usage are its claim's placeholders (Failed, Unknown):
        # a filter on either is on closed receipts (a call in flight listed as Failed).
        stmt = stmt.where(col(InvocationReceiptRow.ended_at).is_not(None))
    if where.outcome is not None:
        stmt = stmt.where(col(InvocationReceiptRow.outcome) == where.outcome)
    if where.usage_status is not None:
        stmt = stmt.where(col(InvocationReceiptRow.usage_status) == where.usage_status)
    if where.deployment_id:
        stmt = stmt.where(col(InvocationReceiptRow.deployment_id) == where.deployment_id)
    if where.profile_id:
        stmt = stmt.where(col(InvocationReceiptRow.profile_id) == where.profile_id)
    if where.run_id is not None:
        stmt = stmt.where(col(InvocationReceiptRow.run_id) == where.run_id)
    started, invocation = (
        col(InvocationReceiptRow.started_at),
        col(InvocationReceiptRow.invocation_id),
    )
    if where.before is not None:
        older = (where.before.started_at, where.before.invocation_id)
        stmt = stmt.where(tuple_(started, invocation) < tuple_(*older))
    found: dict[uuid.UUID, InvocationReceiptRow] = {}
    for part in open_and_closed(stmt):
        part = part.order_by(started.desc(), invocation.desc()).limit(where.limit + 1)
        found.update((row.invocation_id, row) for row in (await session.scalars(part)).all())
    newest = sorted(found.values(), key=lambda r: (r.started_at, r.invocation_id), reverse=True)
    return newest[: where.limit + 1]


def open_and_closed(stmt: S) -> tuple[S, S]:
    """A read of a tenant's newest receipts as two: the open ones, few, through
    ix_receipts_open, then the closed ones, through the partial index ix_receipts_tenant_closed.
    As one read, PostgreSQL walked every receipt the tenant ever had (migration 0008). Open
    first: each statement sees its own moment, and a receipt that closes between them is then
    in both (kept once), where in the other order it would be in neither."""
    ended = col(InvocationReceiptRow.ended_at)
    return stmt.where(ended.is_(None)), stmt.where(ended.is_not(None))


async def receipt(
    session: AsyncSession, tenant_id: str, invocation_id: uuid.UUID
) -> InvocationReceiptRow | None:
    row = await session.get(InvocationReceiptRow, invocation_id)
    return row if row is not None and row.tenant_id == tenant_id else None


async def reconciliations(
    session: AsyncSession, tenant_id: str, invocation_id: uuid.UUID
) -> Sequence[ReceiptReconciliationRow]:
    stmt = (
        select(ReceiptReconciliationRow)
        .where(col(ReceiptReconciliationRow.tenant_id) == tenant_id)
        .where(col(ReceiptReconciliationRow.invocation_id) == invocation_id)
        .order_by(col(ReceiptReconciliationRow.reconciled_at))
    )
    return (await session.scalars(stmt)).all()


async def distinct_values(session: AsyncSession, tenant_id: str) -> tuple[list[str], list[str]]:
    """The tenant's deployments and profiles, for the receipts page's filter lists: from the
    catalog (every receipt names one of each), not a DISTINCT over every receipt the tenant
    ever had, which the page ran on each view."""
    deployments = select(ModelDeploymentRow.deployment_id).where(
        col(ModelDeploymentRow.tenant_id) == tenant_id
    )
    profiles = select(ModelProfileRow.profile_id).where(col(ModelProfileRow.tenant_id) == tenant_id)
    return (
        sorted(set((await session.scalars(deployments)).all())),
        sorted(set((await session.scalars(profiles.distinct())).all())),
    )


# The most the overview counts of the backlog: past it the page says "more than".
BACKLOG_CAP = 10_000


async def awaiting_reconciliation(
    session: AsyncSession, tenant_id: str, since: datetime, cap: int = BACKLOG_CAP
) -> int:
    """The tenant's closed receipts started since `since` (the reconciler's lookback: one older
    is settled by no run any more, final as it is) whose usage is still Unknown or Estimated.
    Counted within the overview's window instead, one a day older than the 24 h window dropped
    out of the backlog while it still awaited its statement. A call that reached no provider
    awaits nothing (store.reconciliation.sent_nothing). Read through ix_receipts_usage_status,
    a range of it, as the usage_unknown gauge is; counted up to `cap` + 1."""
    r = InvocationReceiptRow
    awaiting = (
        select(r.invocation_id)
        .where(col(r.usage_status).in_(sorted(AWAITING)))
        .where(col(r.started_at) >= since)
        .where(col(r.tenant_id) == tenant_id)
        .where(col(r.ended_at).is_not(None))
        .where(not_(sent_nothing()))
        .limit(cap + 1)
        .subquery()
    )
    return int((await session.execute(select(func.count()).select_from(awaiting))).scalar_one())
