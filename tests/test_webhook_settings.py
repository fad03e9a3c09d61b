"""A deploy that changes the webhook settings reaches the subscriptions already running.

A subscription's delivery workflow runs for as long as the subscription does. It used to keep
the settings it was started with for good (continue-as-new carried them on), so an operator who
raised the timeout for a slow receiver changed nothing for the subscriptions that needed it:
only new ones got it. The event being retried got it least of all, its input being fixed.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any, cast

import httpx
import pytest
from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from core.settings import Settings
from tests.conftest import TokenFactory, free_port
from tests.helpers.catalog import register
from tests.helpers.deadline import eventually
from tests.helpers.receiver import Receiver
from tests.helpers.stack import serve, workers

# The receiver answers after this long: past the first deploy's timeout, well within the next's.
RECEIVER_SECONDS = 1.5


@pytest.fixture
async def slow_receiver() -> AsyncIterator[Receiver]:
    receiver = Receiver(port=free_port(), delay=RECEIVER_SECONDS)
    await receiver.start()
    yield receiver
    await receiver.stop()


def on_own_queues(settings: Settings, **update: Any) -> Settings:
    """The suite's settings with task queues of this test's own, so that its workers (and their
    settings) serve its subscription alone."""
    run = uuid.uuid4().hex[:8]
    return settings.model_copy(
        update={
            "temporal_task_queue": f"hooks-{run}",
            "temporal_invocation_task_queue": f"hooks-inv-{run}",
            **update,
        }
    )


async def test_a_raised_timeout_reaches_a_running_subscription_and_its_retried_event(
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    token_for: TokenFactory,
    tenant: str,
    slow_receiver: Receiver,
) -> None:
    before = on_own_queues(settings, webhook_timeout_seconds=0.5)
    after = before.model_copy(update={"webhook_timeout_seconds": 5.0})
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    async with serve(before) as api, httpx.AsyncClient(base_url=api.url, timeout=60) as http:

        async def subscription() -> dict[str, Any]:
            [listed] = (await http.get("/factory/webhook-subscriptions", headers=auth)).json()
            return cast(dict[str, Any], listed)

        async with workers(before, sessions):
            created = await http.post(
                "/factory/webhook-subscriptions", json={"url": slow_receiver.url}, headers=auth
            )
            assert created.status_code == 201, created.text
            slow_receiver.secret = created.json()["signingSecret"]
            await register(http, auth, "slow/a")

            async def timing_out() -> bool:
                sub = await subscription()
                return sub["failedAttempts"] >= 2 and "ReadTimeout" in (sub["lastError"] or "")

            await eventually(timing_out, timeout=30)

        # The deploy: the same subscription, its workflow and its event's retries running on.
        async with workers(after, sessions):

            async def recovered() -> bool:
                sub = await subscription()
                return (sub["failingSince"], sub["failedAttempts"]) == (None, 0)

            await eventually(recovered, timeout=30)
            delivered = {e["subject"] for e in slow_receiver.received}
            assert "slow/a" in delivered
            # An event that happens after the deploy is scheduled with the new settings too.
            await register(http, auth, "slow/b")
            await eventually(
                lambda: "slow/b" in {e["subject"] for e in slow_receiver.received}, timeout=30
            )
            assert (await subscription())["failedAttempts"] == 0


def test_a_retry_cap_below_the_first_interval_is_refused_at_start(settings: Settings) -> None:
    """Temporal refuses a retry policy whose cap is below its first interval (0.5 s): such a
    setting, deployed, stopped every subscription's delivery at its next event. It is refused
    where the process starts instead, naming the setting."""
    with pytest.raises(ValidationError, match="webhook_retry_max_interval_seconds"):
        Settings.model_validate(
            {**settings.model_dump(), "webhook_retry_max_interval_seconds": 0.25}
        )
    assert (
        Settings.model_validate(
            {**settings.model_dump(), "webhook_retry_max_interval_seconds": 0.5}
        ).webhook_retry_max_interval_seconds
        == 0.5
    )
