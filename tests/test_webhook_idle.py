"""An idle webhook subscription waits for events inside one `webhook_pending` (a long poll,
looking every poll interval) instead of running an activity and a timer per poll: about 11
history events every 2 s for each idle subscription, 250 activities a second for 500 of them. An
event that happens meanwhile still goes out within a poll interval."""

from __future__ import annotations

import asyncio

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from activities.webhook_types import polls_queue, workflow_id
from core.settings import Settings
from tests.conftest import TokenFactory, free_port
from tests.helpers.catalog import register
from tests.helpers.deadline import eventually
from tests.helpers.receiver import Receiver
from tests.helpers.stack import serve, workers
from tests.test_webhook_settings import on_own_queues

POLL = 0.1  # webhook_poll_interval_seconds here
# How long the subscription idles: the scenario's length, not a wait for anything. Polled every
# 0.1 s, it made 20 polls in that time, each an activity and a timer.
IDLE_SECONDS = 2.0


async def test_an_idle_subscription_waits_in_one_activity_and_still_delivers_at_once(
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    token_for: TokenFactory,
    tenant: str,
) -> None:
    own = on_own_queues(settings, webhook_poll_interval_seconds=POLL)
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    receiver = Receiver(port=free_port())
    await receiver.start()
    try:
        async with (
            serve(own) as api,
            httpx.AsyncClient(base_url=api.url, timeout=30) as http,
            workers(own, sessions) as client,
        ):
            created = await http.post(
                "/factory/webhook-subscriptions", json={"url": receiver.url}, headers=auth
            )
            assert created.status_code == 201, created.text
            receiver.secret = created.json()["signingSecret"]
            handle = client.get_workflow_handle(
                workflow_id(tenant, created.json()["subscriptionId"])
            )

            async def polls() -> int:
                queues = [
                    e.activity_task_scheduled_event_attributes.task_queue.name
                    async for e in handle.fetch_history_events()
                    if e.HasField("activity_task_scheduled_event_attributes")
                    and e.activity_task_scheduled_event_attributes.activity_type.name
                    == "webhook_pending"
                ]
                # On the polls' own queue: on the shared one each wait held one of its slots.
                assert set(queues) <= {polls_queue(own.temporal_task_queue)}, queues
                return len(queues)

            await eventually(polls, timeout=30)  # the first look is under way
            await asyncio.sleep(IDLE_SECONDS)  # the subscription idles (see IDLE_SECONDS)
            assert await polls() == 1
            # An event while it waits goes out within a poll or so, not at the wait's end.
            await register(http, auth, "idle/a")
            await eventually(lambda: len(receiver.received) == 1, timeout=10)
    finally:
        await receiver.stop()
