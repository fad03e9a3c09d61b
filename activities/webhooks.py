"""Outbox delivery to webhook subscribers: read what is pending, POST it signed, move the
cursor. Delivery is at least once: the cursor moves only after the receiver said 2xx."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Sequence
from datetime import datetime

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.webhook_signing import sign_with
from activities.webhook_targets import TargetRefused, pinned, post
from activities.webhook_types import (
    CursorInput,
    DeliverBatchInput,
    Delivered,
    DeliverInput,
    DeliverySettings,
)
from core import metrics
from core.settings import Settings
from domain.cloudevents import to_cloudevent
from domain.webhook_delivery import failing_too_long
from domain.webhook_targets import Network
from store.columns import utcnow
from store.db import transaction
from store.ops_tables import as_utc
from store.repositories import WebhookSubscriptionRepository
from store.webhook_tables import WebhookSubscriptionRow, previous_signs_until

log = logging.getLogger("model_router.worker")

# What an attempt keeps of its Temporal timeout for the rest of its work once the POST is bounded
# (reading the subscription, noting a failure): both are single statements.
_ATTEMPT_MARGIN_SECONDS = 1.0
# Beyond a POST's own timeout, what one event of a page may take (the subscription's read, the
# receiver's name resolved, a failure noted): the page's bound is this and the timeout, each.
EVENT_MARGIN_SECONDS = 4.0
# A receiver's answer that ends its subscription.
GONE = "receiver answered 410 Gone"


def delivery_settings(settings: Settings) -> DeliverySettings:
    """The webhook delivery settings as a subscription's workflow takes them."""
    return DeliverySettings(
        poll_interval_seconds=settings.webhook_poll_interval_seconds,
        retry_max_interval_seconds=settings.webhook_retry_max_interval_seconds,
        timeout_seconds=settings.webhook_timeout_seconds,
    )


class WebhookActivities:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        http: httpx.AsyncClient,
        delivery: DeliverySettings,
        allowed_private_networks: Sequence[Network] = (),
        end_after_failing_hours: int = 0,
    ) -> None:
        self._sessions = sessions
        self._http = http
        self._delivery = delivery
        self._allowed = list(allowed_private_networks)
        self._end_after_failing_hours = end_after_failing_hours

    async def _subscription(
        self, session: AsyncSession, tenant: str, sub_id: str
    ) -> WebhookSubscriptionRow | None:
        return await WebhookSubscriptionRepository(session, tenant).get(_uuid(sub_id))

    @activity.defn(name="webhook_deliver")
    async def deliver(self, data: DeliverInput) -> None:
        async with self._sessions() as session:
            sub = await self._subscription(session, data.tenant_id, data.subscription_id)
        if sub is None or not sub.active or sub.signing_secret is None:
            return  # unsubscribed while this event was in flight: nothing to deliver to
        body = json.dumps(to_cloudevent(data.event), separators=(",", ":")).encode()
        timestamp = int(time.time())
        keys = [sub.signing_secret]
        if sub.previous_signing_secret and previous_signs_until(sub, utcnow()) is not None:
            keys.append(sub.previous_signing_secret)  # a rotation's overlap
        headers = {
            "Content-Type": "application/cloudevents+json",
            "webhook-id": data.event.event_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": sign_with(keys, data.event.event_id, timestamp, body),
        }
        failure = await self._attempt(data.tenant_id, sub.url, body, headers, self._post_seconds())
        if failure == GONE:
            # The receiver says it is gone for good (410, as Standard Webhooks senders take it):
            # the subscription is ended as its DELETE ends it, and its workflow with it. Retried,
            # a decommissioned receiver was called every minute, for ever.
            metrics.webhook_delivery_failures.add(1, {"tenant": data.tenant_id})
            ended = f"{GONE}: the subscription was ended"
            await self._note(data.tenant_id, sub, ended, ended_at=data.event.position)
            _log_ended(data.tenant_id, sub, "its receiver answered 410 Gone")
            return
        if failure is None:
            if sub.failing_since is not None:  # a write only when a failing streak ends
                # Not failing the delivery over it: the receiver has the event, and a retry
                # would only send it again.
                await self._note(data.tenant_id, sub, None)
            return
        since = as_utc(sub.failing_since) if sub.failing_since is not None else None
        if since is not None and failing_too_long(since, utcnow(), self._end_after_failing_hours):
            metrics.webhook_delivery_failures.add(1, {"tenant": data.tenant_id})
            hours = self._end_after_failing_hours
            ended = f"{failure}; failing for {hours} h or more: the subscription was ended"
            await self._note(data.tenant_id, sub, ended, ended_at=data.event.position)
            _log_ended(data.tenant_id, sub, _failing_for(since, hours, failure))
            return
        # Every failure is retried (with backoff, by the workflow's policy): a receiver that
        # answers 4xx today may be fixed tomorrow, and order must not be broken by skipping.
        # So that one refused event holding every later one is seen, the subscription says
        # since when its delivery fails and why (its view, and the failures metric).
        metrics.webhook_delivery_failures.add(1, {"tenant": data.tenant_id})
        await self._note(data.tenant_id, sub, failure)  # the store away: the retry matters more
        raise ApplicationError(failure)

    @activity.defn(name="webhook_deliver_batch")
    async def deliver_batch(self, data: DeliverBatchInput) -> Delivered:
        """A page of events in order, in one activity, each its own POST as before, up to the
        first the receiver does not take: the workflow then sends that one, and the rest of
        the page, one activity each with its own retries and backoff, as before. One activity
        per event held a subscription to some ten events a second (each a round trip through
        Temporal, about 100 ms: DESIGN §5), below one tenant's ModelInvoked events at the
        spec's 50 calls/s: it fell behind for good. Each event is bounded (its POST by the
        timeout, the rest by a margin), so the page ends within its own bound and no attempt of
        it outlives that; a refusal ends it with how far it got, not with a retry.

        It heartbeats before each event, with how many of the page are delivered: a worker
        killed mid-page is seen gone at the heartbeat timeout (the event's bound and a little),
        not at the page's start-to-close (some 12 minutes for 50 events, the subscription
        stalled meanwhile), and the retry starts at the event under way then."""
        for index in range(_resumed_at(len(data.events)), len(data.events)):
            event = data.events[index]
            if activity.in_activity():
                activity.heartbeat(index)
            try:
                async with asyncio.timeout(data.timeout_seconds + EVENT_MARGIN_SECONDS):
                    await self.deliver(
                        DeliverInput(
                            tenant_id=data.tenant_id,
                            subscription_id=data.subscription_id,
                            event=event,
                            timeout_seconds=data.timeout_seconds,
                        )
                    )
            except (ApplicationError, TimeoutError) as exc:  # refused, noted; or too slow
                log.info("webhook page stopped at event %d: %s", index, type(exc).__name__)
                return Delivered(count=index)
        return Delivered(count=len(data.events))

    def _post_seconds(self) -> float:
        """The worker's delivery timeout now, within what this attempt was scheduled with: an
        event retried since before a deploy keeps its old schedule, and a POST running past it
        would be abandoned by Temporal with the failure unnoted."""
        seconds = self._delivery.timeout_seconds
        scheduled = activity.info().start_to_close_timeout if activity.in_activity() else None
        if scheduled is not None:
            room = scheduled.total_seconds() - _ATTEMPT_MARGIN_SECONDS
            seconds = min(seconds, max(room, _ATTEMPT_MARGIN_SECONDS))
        return seconds

    async def _note(
        self,
        tenant_id: str,
        sub: WebhookSubscriptionRow,
        failure: str | None,
        ended_at: int | None = None,
    ) -> None:
        """Record a failed attempt (or the end of a failing streak) on the subscription, as far
        as the store lets: a delivery is never failed or sent again over it. `ended_at`: the
        subscription is ended too (its receiver is gone) at that event, which it did not
        deliver; a write of that is retried, by raising."""
        try:
            async with transaction(self._sessions) as session:
                subscriptions = WebhookSubscriptionRepository(session, tenant_id)
                if failure is None:
                    await subscriptions.delivery_recovered(sub.subscription_id)
                else:
                    await subscriptions.delivery_failed(sub.subscription_id, failure)
                if ended_at is not None:
                    # Every event before this one was delivered (in order, the page's too): the
                    # cursor says so, so that the subscription created again from it starts at
                    # the event it ended on, and sends none of the page again.
                    await subscriptions.advance(sub.subscription_id, ended_at - 1)
                    await subscriptions.deactivate(sub.subscription_id)
        except Exception as exc:
            if ended_at is not None:
                raise
            log.warning("webhook delivery state not recorded: %s", type(exc).__name__)

    async def _attempt(
        self, tenant_id: str, url: str, body: bytes, headers: dict[str, str], seconds: float
    ) -> str | None:
        """One POST of the event; None when the receiver accepted it, else why not (a status
        or an error type: never a body)."""
        try:
            # Resolved and checked again now (DNS rebinding); activities/webhook_targets.py says
            # how what is reached is what was checked.
            # Its tenant named, so that its receivers' names that hang hold back no other's.
            target = await pinned(url, self._allowed, tenant=tenant_id)
        except TargetRefused as exc:
            return f"receiver refused: {exc}"
        try:
            status = await post(self._http, target, content=body, headers=headers, seconds=seconds)
        except httpx.HTTPError as exc:
            return f"receiver unreachable: {type(exc).__name__}"
        if status == 410:
            return GONE
        if status >= 300:
            return f"receiver answered {status}"
        return None

    @activity.defn(name="webhook_advance")
    async def advance(self, data: CursorInput) -> None:
        async with transaction(self._sessions) as session:
            await WebhookSubscriptionRepository(session, data.tenant_id).advance(
                _uuid(data.subscription_id), data.position
            )


def _log_ended(tenant_id: str, sub: WebhookSubscriptionRow, why: str) -> None:
    """Say that a subscription was ended, once it is: it was seen only in its listing
    (GET /factory/webhook-subscriptions), and the failures metric counted it as one more
    failure. Its receiver by host only: a URL's path or query may carry the tenant's token."""
    host = httpx.URL(sub.url).host
    log.warning(
        "webhook subscription %s of tenant %s (receiver host %s) ended: %s",
        sub.subscription_id,
        tenant_id,
        host,
        why,
    )


def _failing_for(since: datetime, hours: int, failure: str) -> str:
    """Why a subscription failing too long was ended, for its log line."""
    failing = int((utcnow() - since).total_seconds() // 3600)
    return (
        f"its receiver has failed every delivery since {since:%Y-%m-%dT%H:%M:%SZ}, for {failing} h "
        f"(MODEL_ROUTER_WEBHOOK_END_AFTER_FAILING_HOURS={hours}); last: {failure}"
    )


def _uuid(value: str) -> uuid.UUID:
    return uuid.UUID(value)


def _resumed_at(events: int) -> int:
    """Where a page's attempt starts: past the events an earlier attempt heartbeat as
    delivered (every one before the index it gave), else at the first."""
    if not activity.in_activity():
        return 0
    details = activity.info().heartbeat_details
    try:
        done = int(details[0]) if details else 0
    except (TypeError, ValueError):
        return 0
    return min(max(done, 0), events)
