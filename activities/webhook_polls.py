"""`webhook_pending`: what a subscription has to deliver, looked for as a long poll.

An idle subscription waits here for events, looking every poll interval, for up to the wait its
workflow asks (30 s), rather than in a timer between one-look activities: that cost about 11
history events every 2 s per idle subscription, 250 activities a second for 500 of them. Each
look is one indexed statement. While waiting it heartbeats every few seconds whatever the poll
interval (a deploy that lengthened the interval past the heartbeat timeout had every wait time
out), and it answers at once when its worker begins to stop.

The waits run on a queue of their own (`polls_queue`), on a worker whose slots are only these
waiting coroutines: on the shared queue they held its 100 activity slots, and 100 idle
subscriptions kept every lifecycle step, probe and delivery waiting behind them."""

from __future__ import annotations

import asyncio
import time
import uuid

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio import activity

from activities.webhook_types import DeliverySettings, Pending, PendingInput
from store.repositories import OutboxRepository, WebhookSubscriptionRepository
from store.views import outbox_event

# Longest pause between two heartbeats of a wait (its workflow's heartbeat timeout is 20 s).
HEARTBEAT_EVERY_SECONDS = 5.0


class WebhookPolls:
    def __init__(
        self, sessions: async_sessionmaker[AsyncSession], delivery: DeliverySettings
    ) -> None:
        self._sessions = sessions
        self._delivery = delivery

    @activity.defn(name="webhook_pending")
    async def pending(self, data: PendingInput) -> Pending:
        """What the subscription has to deliver after `data.after`; when nothing, looked for
        again every poll interval for up to `data.wait_seconds`."""
        until = time.monotonic() + data.wait_seconds
        while True:
            found = await self._look(data)
            if not found.active or found.events or found.scanned_to > data.after:
                return found
            look_at = min(until, time.monotonic() + self._delivery.poll_interval_seconds)
            while (left := look_at - time.monotonic()) > 0:
                if activity.is_worker_shutdown():
                    return found
                activity.heartbeat()
                stopping = asyncio.ensure_future(activity.wait_for_worker_shutdown())
                try:
                    await asyncio.wait({stopping}, timeout=min(left, HEARTBEAT_EVERY_SECONDS))
                finally:
                    stopping.cancel()
            if time.monotonic() >= until or activity.is_worker_shutdown():
                return found

    async def _look(self, data: PendingInput) -> Pending:
        async with self._sessions() as session:
            repo = WebhookSubscriptionRepository(session, data.tenant_id)
            sub = await repo.get(uuid.UUID(data.subscription_id))
            if sub is None or not sub.active:
                return Pending(
                    active=False, events=[], scanned_to=data.after, delivery=self._delivery
                )
            rows = await OutboxRepository(session, data.tenant_id).list_after(
                max(data.after, sub.delivered_position), data.limit
            )
        wanted = set(sub.event_types)
        return Pending(
            active=True,
            events=[outbox_event(r) for r in rows if not wanted or r.event_type in wanted],
            # The cursor passes events the subscriber did not ask for, too.
            scanned_to=int(rows[-1].position or 0) if rows else data.after,
            delivery=self._delivery,
        )
