"""A subscription ended by its receiver (a 410 Gone, or failing past
WEBHOOK_END_AFTER_FAILING_HOURS) is logged as a warning: before, an operator saw it only in the
tenant's listing, and the failures metric counted it as one more failure. The line names the
tenant, the subscription and why, and of the receiver's URL its host only: a path or query may
carry the tenant's token."""

from __future__ import annotations

import ipaddress
import logging
from datetime import timedelta

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col

from activities.webhook_signing import new_secret
from activities.webhook_types import DeliverInput, DeliverySettings
from activities.webhooks import WebhookActivities
from store.columns import utcnow
from store.db import transaction
from store.repositories import WebhookSubscriptionRepository
from store.webhook_tables import WebhookSubscriptionRow
from tests.conftest import free_port
from tests.helpers.outbox_events import state_changed
from tests.helpers.receiver import Receiver

LOOPBACK = [ipaddress.ip_network("127.0.0.0/8")]
# What the receiver's URL carries past its host, which no log line may.
PATH, QUERY = "/hook", "token=query-secret"


@pytest.mark.parametrize(
    ("status", "failing_hours", "why"),
    [
        (410, None, "its receiver answered 410 Gone"),
        (
            503,
            121,
            "its receiver has failed every delivery since {since}, for 121 h "
            "(MODEL_ROUTER_WEBHOOK_END_AFTER_FAILING_HOURS=120); last: receiver answered 503",
        ),
    ],
    ids=["gone", "failing-too-long"],
)
async def test_a_subscription_ended_by_its_receiver_is_logged_with_why(
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    caplog: pytest.LogCaptureFixture,
    status: int,
    failing_hours: int | None,
    why: str,
) -> None:
    receiver = Receiver(port=free_port(), failing=True, failing_status=status)
    secret = new_secret()
    url = f"http://127.0.0.1:{receiver.port}{PATH}?{QUERY}"
    async with transaction(sessions) as session:
        row = WebhookSubscriptionRepository(session, tenant).add(
            url=url, signing_secret=secret, event_types=[], delivered_position=0
        )
    sub = row.subscription_id
    since = None
    if failing_hours is not None:
        since = (utcnow() - timedelta(hours=failing_hours, minutes=1)).replace(microsecond=0)
        async with transaction(sessions) as session:
            await session.execute(
                sa.update(WebhookSubscriptionRow)
                .where(col(WebhookSubscriptionRow.subscription_id) == sub)
                .values(failing_since=since, failed_attempts=500)
            )
    await receiver.start()
    try:
        async with httpx.AsyncClient() as client:
            webhooks = WebhookActivities(
                sessions,
                client,
                DeliverySettings(
                    poll_interval_seconds=1, retry_max_interval_seconds=1, timeout_seconds=5
                ),
                LOOPBACK,
                end_after_failing_hours=120,
            )
            with caplog.at_level(logging.WARNING, logger="model_router.worker"):
                await webhooks.deliver(
                    DeliverInput(
                        tenant_id=tenant,
                        subscription_id=str(sub),
                        event=state_changed(tenant),
                        timeout_seconds=5,
                    )
                )
    finally:
        await receiver.stop()
    assert receiver.refused_while_failing == 1
    async with sessions() as session:
        ended = await session.get(WebhookSubscriptionRow, sub)
    assert ended is not None and not ended.active
    [line] = [
        r.getMessage()
        for r in caplog.records
        if r.name == "model_router.worker" and r.levelno == logging.WARNING
    ]
    stated = why.format(since=f"{since:%Y-%m-%dT%H:%M:%SZ}") if since is not None else why
    assert line == (
        f"webhook subscription {sub} of tenant {tenant} (receiver host 127.0.0.1) ended: {stated}"
    )
    assert PATH not in line and "query-secret" not in line and secret not in line
