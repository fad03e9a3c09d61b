"""How long a run's events stay in the outbox: `RoutePlanResolved`, `ModelInvoked` and
`ModelFallbackUsed`, one or more per invocation, some 4 million rows a day at 50 calls/s, kept
for ever before. Past the retention they are deleted, a batch at a time, oldest first, unless
an active webhook subscription of their tenant has not delivered them yet. The receipt is the
call's durable record; these are its notifications. Catalog events (a deployment's or a
profile's, a few a day) are kept: they are the console's history of each."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from store.tables import RUN_EVENTS_SQL, OutboxEventRow
from store.webhook_tables import WebhookSubscriptionRow


async def prune_run_events(session: AsyncSession, older_than: datetime, limit: int) -> int:
    """Deletes at most `limit` run events that occurred before `older_than`; how many."""
    o, s = OutboxEventRow, WebhookSubscriptionRow
    # Only a subscription that takes the event holds it back: every type (stored as the empty
    # list) or a list naming its type. One taking only catalog events, failing for good, kept
    # its tenant's run events for ever. Read as the list's JSON text, on both engines: each
    # event name is a quoted word no other name holds.
    listed = sa.cast(col(s.event_types), sa.Text)
    takes_it = sa.or_(
        sa.func.replace(listed, " ", "") == "[]",
        listed.contains(sa.literal('"') + col(o.event_type) + sa.literal('"')),
    )
    undelivered = (
        sa.select(sa.literal(1))
        .where(col(s.active))
        .where(col(s.tenant_id) == col(o.tenant_id))
        .where(col(s.delivered_position) < col(o.position))
        .where(takes_it)
        .exists()
    )
    # Oldest first by age, through ix_outbox_run_events_age (its predicate written as the
    # index's). In position order only the primary key served it: with fewer than `limit`
    # expired, PostgreSQL walked the whole outbox every minute looking for more.
    doomed = (
        sa.select(col(o.position))
        .where(RUN_EVENTS_SQL)
        .where(col(o.occurred_at) < older_than)
        .where(~undelivered)
        .order_by(col(o.occurred_at), col(o.position))
        .limit(limit)
    )
    deleted = await session.execute(
        sa.delete(o).where(col(o.position).in_(doomed.scalar_subquery()))
    )
    return int(getattr(deleted, "rowcount", 0) or 0)
