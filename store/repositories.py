"""Tenant-scoped repositories.

A repository is built for exactly one tenant and every query it issues filters by that tenant,
so no method can read or write across tenants: another tenant's row is indistinguishable from a
missing one.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import func, literal, or_, tuple_, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col, select

from domain.enums import DeploymentState, ProfileStatus
from domain.profiles import version_order
from store.outbox_horizon import settled_position
from store.tables import (
    CapabilityScoreRow,
    InvocationReceiptRow,
    ModelDeploymentRow,
    ModelProfileRow,
    OutboxEventRow,
    UtcDateTime,
    utcnow,
)
from store.webhook_tables import WebhookSubscriptionRow, previous_signs_until


class TenantRepository:
    def __init__(self, session: AsyncSession, tenant_id: str) -> None:
        if not tenant_id:
            raise ValueError("a tenant is required")
        self.session = session
        self.tenant_id = tenant_id


class ModelDeploymentRepository(TenantRepository):
    async def get(self, deployment_id: str) -> ModelDeploymentRow | None:
        return await self.session.get(ModelDeploymentRow, (self.tenant_id, deployment_id))

    async def list(self, state: DeploymentState | None = None) -> Sequence[ModelDeploymentRow]:
        stmt = select(ModelDeploymentRow).where(col(ModelDeploymentRow.tenant_id) == self.tenant_id)
        if state is not None:
            stmt = stmt.where(col(ModelDeploymentRow.state) == state)
        stmt = stmt.order_by(col(ModelDeploymentRow.deployment_id))
        return (await self.session.scalars(stmt)).all()

    def add(self, row: ModelDeploymentRow) -> None:
        if row.tenant_id != self.tenant_id:
            raise ValueError("row belongs to another tenant")
        self.session.add(row)


class CapabilityScoreRepository(TenantRepository):
    async def current(self, deployment_id: str, evidence_ref: str | None) -> dict[str, float]:
        """The scores of the deployment's current evaluation record."""
        if evidence_ref is None:
            return {}
        stmt = (
            select(CapabilityScoreRow)
            .where(col(CapabilityScoreRow.tenant_id) == self.tenant_id)
            .where(col(CapabilityScoreRow.deployment_id) == deployment_id)
            .where(col(CapabilityScoreRow.evidence_ref) == evidence_ref)
        )
        rows = (await self.session.scalars(stmt)).all()
        return {r.capability: float(r.score) for r in rows if r.score is not None}

    async def current_rows(
        self, deployment_id: str, evidence_ref: str | None
    ) -> Sequence[CapabilityScoreRow]:
        if evidence_ref is None:
            return []
        stmt = (
            select(CapabilityScoreRow)
            .where(col(CapabilityScoreRow.tenant_id) == self.tenant_id)
            .where(col(CapabilityScoreRow.deployment_id) == deployment_id)
            .where(col(CapabilityScoreRow.evidence_ref) == evidence_ref)
            .order_by(col(CapabilityScoreRow.capability))
        )
        return (await self.session.scalars(stmt)).all()


class ModelProfileRepository(TenantRepository):
    async def latest_active(self) -> list[ModelProfileRow]:
        """The newest active version of each profile: what new runs get."""
        latest: dict[str, ModelProfileRow] = {}
        for row in await self.list_active():
            current = latest.get(row.profile_id)
            if current is None or version_order(row.version) > version_order(current.version):
                latest[row.profile_id] = row
        return [latest[k] for k in sorted(latest)]

    async def get_version(self, profile_id: str, version: str) -> ModelProfileRow | None:
        stmt = (
            select(ModelProfileRow)
            .where(col(ModelProfileRow.tenant_id) == self.tenant_id)
            .where(col(ModelProfileRow.profile_id) == profile_id)
            .where(col(ModelProfileRow.version) == version)
        )
        return (await self.session.scalars(stmt)).first()

    async def list_active(self) -> Sequence[ModelProfileRow]:
        stmt = (
            select(ModelProfileRow)
            .where(col(ModelProfileRow.tenant_id) == self.tenant_id)
            .where(col(ModelProfileRow.status) == ProfileStatus.ACTIVE)
            .order_by(col(ModelProfileRow.profile_id), col(ModelProfileRow.version))
        )
        return (await self.session.scalars(stmt)).all()


class InvocationReceiptRepository(TenantRepository):
    async def get(self, invocation_id: Any) -> InvocationReceiptRow | None:
        row = await self.session.get(InvocationReceiptRow, invocation_id)
        return row if row is not None and row.tenant_id == self.tenant_id else None

    async def list_for_run(
        self,
        run_id: Any,
        *,
        after: InvocationReceiptRow | None = None,
        limit: int | None = None,
    ) -> Sequence[InvocationReceiptRow]:
        """The run's receipts oldest first (by start, then id: a stable order to page by),
        those after `after` only, at most `limit`."""
        started, invocation = (
            col(InvocationReceiptRow.started_at),
            col(InvocationReceiptRow.invocation_id),
        )
        stmt = (
            select(InvocationReceiptRow)
            .where(col(InvocationReceiptRow.tenant_id) == self.tenant_id)
            .where(col(InvocationReceiptRow.run_id) == run_id)
            .order_by(started, invocation)
            .limit(limit)
        )
        if after is not None:
            stmt = stmt.where(
                tuple_(started, invocation) > tuple_(after.started_at, after.invocation_id)
            )
        return (await self.session.scalars(stmt)).all()


class OutboxRepository(TenantRepository):
    def append(
        self,
        *,
        event_type: str,
        topic: str,
        aggregate_type: str,
        aggregate_id: str,
        payload: dict[str, Any],
    ) -> OutboxEventRow:
        row = OutboxEventRow(
            tenant_id=self.tenant_id,
            event_type=event_type,
            topic=topic,
            aggregate_type=aggregate_type,
            aggregate_id=aggregate_id,
            payload=payload,
        )
        self.session.add(row)
        return row

    async def list_after(self, position: int, limit: int = 100) -> Sequence[OutboxEventRow]:
        """This tenant's events after `position`, in order, up to the settled horizon: none is
        returned while an earlier position's transaction may still commit (a cursor moved past
        it would never see that event; store/outbox_horizon.py)."""
        settled = await settled_position(self.session)  # first: see outbox_horizon
        stmt = (
            select(OutboxEventRow)
            .where(col(OutboxEventRow.tenant_id) == self.tenant_id)
            .where(col(OutboxEventRow.position) > position)
            .order_by(col(OutboxEventRow.position))
            .limit(limit)
        )
        if settled is not None:
            stmt = stmt.where(col(OutboxEventRow.position) <= settled)
        return (await self.session.scalars(stmt)).all()


async def active_subscriptions(
    session: AsyncSession, tenant_ids: Sequence[str] | None = None
) -> Sequence[WebhookSubscriptionRow]:
    """The active subscriptions of `tenant_ids` (None: of every tenant, as the worker's upkeep
    of their delivery workflows serves them all: activities/webhook_runs.py)."""
    stmt = select(WebhookSubscriptionRow).where(col(WebhookSubscriptionRow.active))
    if tenant_ids is not None:
        stmt = stmt.where(col(WebhookSubscriptionRow.tenant_id).in_(list(tenant_ids)))
    return (await session.scalars(stmt.order_by(col(WebhookSubscriptionRow.created_at)))).all()


class OverlapRunning(Exception):
    """A rotation refused: the previous rotation's overlap runs until `until`."""

    def __init__(self, until: datetime) -> None:
        super().__init__(f"the previous secret signs until {until.isoformat()}")
        self.until = until


class WebhookSubscriptionRepository(TenantRepository):
    async def list(self) -> Sequence[WebhookSubscriptionRow]:
        stmt = (
            select(WebhookSubscriptionRow)
            .where(col(WebhookSubscriptionRow.tenant_id) == self.tenant_id)
            .order_by(col(WebhookSubscriptionRow.created_at))
        )
        return (await self.session.scalars(stmt)).all()

    async def active_count(self) -> int:
        """The tenant's active subscriptions, counted under a lock held to the end of the
        transaction (PostgreSQL), so that a create that counts and adds is one at a time per
        tenant: concurrent creates each counted the others' rows as not there yet, and a
        tenant's script creating eight at once held eight past a cap of two."""
        if self.session.get_bind().dialect.name == "postgresql":
            key = literal(f"webhook-subscriptions:{self.tenant_id}")
            await self.session.execute(
                select(func.pg_advisory_xact_lock(func.hashtextextended(key, 0)))
            )
        stmt = (
            select(func.count())
            .select_from(WebhookSubscriptionRow)
            .where(col(WebhookSubscriptionRow.tenant_id) == self.tenant_id)
            .where(col(WebhookSubscriptionRow.active))
        )
        return int(await self.session.scalar(stmt) or 0)

    async def get(self, subscription_id: Any) -> WebhookSubscriptionRow | None:
        row = await self.session.get(WebhookSubscriptionRow, subscription_id)
        return row if row is not None and row.tenant_id == self.tenant_id else None

    def add(
        self, *, url: str, signing_secret: str, event_types: Sequence[str], delivered_position: int
    ) -> WebhookSubscriptionRow:
        row = WebhookSubscriptionRow(
            tenant_id=self.tenant_id,
            url=url,
            signing_secret=signing_secret,
            event_types=[*event_types],
            delivered_position=delivered_position,
        )
        self.session.add(row)
        return row

    async def discard(self, subscription_id: uuid.UUID) -> None:
        """Remove a subscription whose delivery never started (it never existed for anyone)."""
        row = await self.get(subscription_id)
        if row is not None:
            await self.session.delete(row)

    async def deactivate(self, subscription_id: uuid.UUID) -> bool:
        """Whether there was such a subscription. Its delivery workflow sees it inactive at its
        next look and ends. Its signing secrets go with it: nothing signs for it again (a
        delivery already under way holds what it read), and none is ever shown again, so a
        row kept for its history held a key to forge its receiver's deliveries for ever."""
        row = await self.get(subscription_id)
        if row is None:
            return False
        row.active = False
        row.signing_secret = None
        row.previous_signing_secret = None
        row.previous_secret_until = None
        return True

    async def rotate_secret(
        self, subscription_id: uuid.UUID, secret: str, overlap_until: datetime
    ) -> WebhookSubscriptionRow | None:
        """Sign with `secret` from now on, and with the one it replaces as well until
        `overlap_until`; None for no such active subscription. One statement (the replaced
        secret is the row's as the update finds it), so that of two rotations at once the
        second sees the first's overlap, on SQLite too, where a read then a write lost the
        first rotation's.

        A rotation keeping the replaced secret while an earlier rotation's overlap still runs
        raises `OverlapRunning`, the row unchanged: it replaced that rotation's secret and
        dropped the one before it at once, which the receiver, not switched yet, still verified
        with, and every delivery failed until the subscription was ended. One with no overlap
        (a leaked secret: `overlap_until` not after now) is taken whenever: the new secret
        alone, at once."""
        w = WebhookSubscriptionRow
        # Bounded: asked again only when the overlap ended between the update and the read, which
        # a second try settles; a row whose stored time SQL and Python read apart (a hand-edited
        # SQLite text) would have spun here holding the write transaction.
        stored: datetime | None = None
        for _ in range(3):
            now = utcnow()
            keeps = overlap_until > now
            stmt = (
                update(w)
                .where(col(w.tenant_id) == self.tenant_id)
                .where(col(w.subscription_id) == subscription_id)
                .where(col(w.active))
            )
            if keeps:
                # As the delivery reads it (activities/webhooks.py): a previous secret held
                # and its time not up.
                stmt = stmt.where(
                    or_(
                        col(w.previous_signing_secret).is_(None),
                        col(w.previous_secret_until).is_(None),
                        col(w.previous_secret_until) <= literal(now, UtcDateTime()),
                    )
                )
            stmt = (
                stmt.values(
                    # With no overlap (a leaked secret) the replaced one is not kept at all.
                    previous_signing_secret=col(w.signing_secret) if keeps else None,
                    signing_secret=secret,
                    previous_secret_until=overlap_until,
                )
                .returning(col(w.subscription_id))
                .execution_options(synchronize_session=False)
            )
            if (await self.session.execute(stmt)).first() is not None:
                return await self.session.get(w, subscription_id, populate_existing=True)
            row = await self.session.get(w, subscription_id, populate_existing=True)
            if row is None or row.tenant_id != self.tenant_id or not row.active:
                return None
            stored = row.previous_secret_until
            running = previous_signs_until(row, now)
            if running is not None:
                raise OverlapRunning(running)
            # Its overlap was ended between the update and this read (a rotation with none
            # committed meanwhile): asked again.
        raise OverlapRunning(stored or utcnow())

    async def delivery_failed(self, subscription_id: uuid.UUID, reason: str) -> None:
        """Count a refused or failed attempt; the streak's start is kept."""
        since = col(WebhookSubscriptionRow.failing_since)
        await self.session.execute(
            update(WebhookSubscriptionRow)
            .where(col(WebhookSubscriptionRow.tenant_id) == self.tenant_id)
            .where(col(WebhookSubscriptionRow.subscription_id) == subscription_id)
            .values(
                failing_since=func.coalesce(since, literal(utcnow(), UtcDateTime())),
                failed_attempts=col(WebhookSubscriptionRow.failed_attempts) + 1,
                last_error=reason[:300],
            )
        )

    async def delivery_recovered(self, subscription_id: uuid.UUID) -> None:
        await self.session.execute(
            update(WebhookSubscriptionRow)
            .where(col(WebhookSubscriptionRow.tenant_id) == self.tenant_id)
            .where(col(WebhookSubscriptionRow.subscription_id) == subscription_id)
            .values(failing_since=None, failed_attempts=0, last_error=None)
        )

    async def advance(self, subscription_id: uuid.UUID, position: int) -> None:
        """Move the delivery cursor forward, never back (a repeated write changes nothing), of
        an active subscription only. An ended one (410, failing too long, deleted) stopped at an
        event its receiver never took, and the workflow's advance past the whole page came
        after: created again from its `deliveredPosition`, that event and the rest of its page
        were passed over, silently."""
        await self.session.execute(
            update(WebhookSubscriptionRow)
            .where(col(WebhookSubscriptionRow.tenant_id) == self.tenant_id)
            .where(col(WebhookSubscriptionRow.subscription_id) == subscription_id)
            .where(col(WebhookSubscriptionRow.active))
            .where(col(WebhookSubscriptionRow.delivered_position) < position)
            .values(delivered_position=position)
        )


async def feed_end(session: AsyncSession) -> int:
    """The last position any tenant's event took, as far as the store still tells: the largest
    present, or a subscription's cursor past it. Every later event takes a larger one (SQLite's
    AUTOINCREMENT, migration 0018; PostgreSQL's sequence). From the events alone, once the
    prune had taken the newest, a subscription ended at its cursor and created again from it
    (`startAfter` = its `deliveredPosition`, as the README says to resume) was refused as past
    the end of the feed."""
    events = await session.scalar(select(func.max(OutboxEventRow.position)))
    cursors = await session.scalar(select(func.max(WebhookSubscriptionRow.delivered_position)))
    return max(int(events or 0), int(cursors or 0))


async def last_position(session: AsyncSession, tenant_id: str) -> int:
    stmt = select(func.max(OutboxEventRow.position)).where(
        col(OutboxEventRow.tenant_id) == tenant_id
    )
    return int((await session.scalar(stmt)) or 0)
