"""A receiver's name is looked up on a thread of its own (activities/webhook_targets.py): one
tenant's receivers on names whose DNS hangs hold back none of another tenant's deliveries, and
what that tenant's hung lookups may pile up to is bounded, past which its new ones are refused
at once."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import threading
import uuid
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.exceptions import ApplicationError

from activities import webhook_targets
from activities.webhook_signing import new_secret
from activities.webhook_types import DeliverInput, DeliverySettings
from activities.webhooks import WebhookActivities
from domain.cloudevents import OutboxEvent
from store.db import transaction
from store.repositories import WebhookSubscriptionRepository
from tests.conftest import free_port
from tests.helpers.deadline import UNBOUNDED, eventually
from tests.helpers.receiver import Receiver

LOOPBACK = [ipaddress.ip_network("127.0.0.0/8")]
# Names under it never answer (their lookups hang until the test ends); any other `.test` name
# resolves to loopback.
HANGS = ".hang.test"


async def test_one_tenants_names_that_hang_hold_back_no_other_tenants_delivery(
    sessions: async_sessionmaker[AsyncSession], tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With four lookup threads shared by every tenant, one tenant's four receivers on names
    that hang took them all: every other tenant's delivery waited out the lookup bound and
    failed, for as long as the resolver took to give up on those names."""
    other = f"tenant-{uuid.uuid4().hex[:8]}"
    release = threading.Event()
    looked_up: list[str] = []
    real = socket.getaddrinfo

    def getaddrinfo(host: str, port: Any, *args: Any, **kwargs: Any) -> Any:
        looked_up.append(host)
        if host.endswith(HANGS):
            release.wait(UNBOUNDED)  # a resolver that never answers
            raise socket.gaierror(socket.EAI_AGAIN, "no answer")
        return real("127.0.0.1" if host.endswith(".test") else host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(webhook_targets, "RESOLVE_SECONDS", 1.0)
    # Twice the four threads every tenant shared.
    hung = [f"r{i}{HANGS}" for i in range(8)]
    secret = new_secret()
    receiver = Receiver(port=free_port(), secret=secret)
    await receiver.start()
    async with httpx.AsyncClient() as client:
        webhooks = WebhookActivities(
            sessions,
            client,
            DeliverySettings(
                poll_interval_seconds=1, retry_max_interval_seconds=1, timeout_seconds=5
            ),
            LOOPBACK,
        )

        async def deliver(tenant_id: str, url: str, position: int) -> None:
            sub = await _subscription(sessions, tenant_id, url, secret)
            await webhooks.deliver(
                DeliverInput(
                    tenant_id=tenant_id,
                    subscription_id=sub,
                    event=_event(tenant_id, position),
                    timeout_seconds=5,
                )
            )

        try:
            hanging = [
                asyncio.ensure_future(deliver(tenant, f"http://{name}/hook", 1)) for name in hung
            ]
            # At least the four threads every tenant shared are held (each of its names, now).
            await eventually(lambda: len(set(hung) & set(looked_up)) >= 4)
            # The other tenant's receiver, by name, is looked up and delivered to meanwhile.
            named = f"http://receiver.test:{receiver.port}/hook"
            await asyncio.wait_for(deliver(other, named, 1), UNBOUNDED)
            assert len(receiver.received) == 1
            for failed in await asyncio.gather(*hanging, return_exceptions=True):
                assert isinstance(failed, ApplicationError), failed
                assert "did not resolve within 1 s" in str(failed), failed
            # Its lookups past their bound and still running, as many as it may have: its
            # next name is refused at once, never looked up, while the other tenant's are.
            assert webhook_targets.TENANT_HUNG_LOOKUPS == len(hung)
            with pytest.raises(ApplicationError, match="not looked up: 8 of this tenant"):
                await asyncio.wait_for(deliver(tenant, f"http://late{HANGS}/hook", 2), UNBOUNDED)
            assert f"late{HANGS}" not in looked_up
            await asyncio.wait_for(deliver(other, named, 2), UNBOUNDED)
            assert len(receiver.received) == 2
        finally:
            release.set()
            await receiver.stop()
        # Once its lookups have ended, the tenant's names are looked up afresh.
        await eventually(lambda: not webhook_targets._LOOKUPS)
        with pytest.raises(ApplicationError, match="does not resolve"):
            await deliver(tenant, f"http://late{HANGS}/hook", 2)
        assert looked_up.count(f"late{HANGS}") == 1


async def _subscription(
    sessions: async_sessionmaker[AsyncSession], tenant_id: str, url: str, secret: str
) -> str:
    async with transaction(sessions) as session:
        row = WebhookSubscriptionRepository(session, tenant_id).add(
            url=url, signing_secret=secret, event_types=[], delivered_position=0
        )
    return str(row.subscription_id)


def _event(tenant_id: str, position: int) -> OutboxEvent:
    return OutboxEvent(
        position=position,
        event_id=str(uuid.uuid4()),
        tenant_id=tenant_id,
        event_type="DeploymentStateChanged",
        topic="model-access.deployments.v1.deployment-state-changed",
        aggregate_type="ModelDeployment",
        aggregate_id="a/b",
        payload={},
        occurred_at=datetime.now(UTC),
    )
