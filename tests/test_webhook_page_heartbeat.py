"""A page of webhook events heartbeats as it goes: a worker killed mid-page is seen gone at the
heartbeat timeout, not at the page's start-to-close (some 12 minutes for 50 events, every
affected subscription stalled meanwhile), and the retry starts at the event under way. It runs
on the deliveries' own queue, not in the slots probes and lifecycle steps wait for."""

from __future__ import annotations

import dataclasses
import ipaddress
from datetime import timedelta
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment

from activities.webhook_signing import new_secret
from activities.webhook_types import (
    DeliverBatchInput,
    DeliverySettings,
    deliveries_queue,
    workflow_id,
)
from activities.webhooks import EVENT_MARGIN_SECONDS, WebhookActivities
from core.settings import Settings
from store.db import transaction
from store.repositories import WebhookSubscriptionRepository
from tests.conftest import TokenFactory, free_port
from tests.helpers.catalog import register
from tests.helpers.deadline import eventually
from tests.helpers.outbox_events import state_changed
from tests.helpers.receiver import Receiver


async def test_a_pages_activity_runs_on_the_deliveries_queue_with_a_heartbeat_timeout(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    settings: Settings,
) -> None:
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    receiver = Receiver(port=free_port())
    await receiver.start()
    try:
        created = await http.post(
            "/factory/webhook-subscriptions", json={"url": receiver.url}, headers=auth
        )
        assert created.status_code == 201, created.text
        receiver.secret = created.json()["signingSecret"]
        await register(http, auth, "heartbeat/a")
        await eventually(lambda: len(receiver.received) >= 1)
    finally:
        await receiver.stop()
    handle = temporal_client.get_workflow_handle(
        workflow_id(tenant, created.json()["subscriptionId"])
    )
    pages = [
        e.activity_task_scheduled_event_attributes
        async for e in handle.fetch_history_events()
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == "webhook_deliver_batch"
    ]
    assert pages
    for page in pages:
        # Past one event's own bound in the activity (its POST's 10 s and a margin), so that a
        # slow receiver is not taken for a dead worker; far below the page's 12 minutes.
        beat = page.heartbeat_timeout.ToTimedelta()
        assert timedelta(seconds=10 + EVENT_MARGIN_SECONDS) < beat <= timedelta(seconds=30), page
        assert page.task_queue.name == deliveries_queue(settings.temporal_task_queue), page


async def test_a_page_retried_after_its_worker_went_starts_at_the_event_under_way(
    sessions: async_sessionmaker[AsyncSession], tenant: str
) -> None:
    """The attempt before heartbeat that two of the page's four events were delivered: the
    retry sends the other two, in order, and heartbeats its own progress before each."""
    receiver = Receiver(port=free_port())
    await receiver.start()
    try:
        async with transaction(sessions) as session:
            row = WebhookSubscriptionRepository(session, tenant).add(
                url=receiver.url,
                signing_secret=new_secret(),
                event_types=[],
                delivered_position=0,
            )
        receiver.secret = row.signing_secret or ""
        events = [state_changed(tenant, n, aggregate_id=f"a/{n}") for n in (11, 12, 13, 14)]
        env = ActivityEnvironment()
        env.info = dataclasses.replace(
            env.info, heartbeat_details=[2], start_to_close_timeout=timedelta(seconds=60)
        )
        beats: list[Any] = []
        env.on_heartbeat = lambda *details: beats.append(details[0])
        async with httpx.AsyncClient() as client:
            activities = WebhookActivities(
                sessions,
                client,
                DeliverySettings(
                    poll_interval_seconds=1, retry_max_interval_seconds=1, timeout_seconds=10
                ),
                [ipaddress.ip_network("127.0.0.0/8")],
            )
            delivered = await env.run(
                activities.deliver_batch,
                DeliverBatchInput(
                    tenant_id=tenant,
                    subscription_id=str(row.subscription_id),
                    events=events,
                    timeout_seconds=10,
                ),
            )
    finally:
        await receiver.stop()
    assert delivered.count == 4
    assert [int(e["sequence"]) for e in receiver.received] == [13, 14]
    assert beats == [2, 3]
