"""A receiver's name is looked up on a thread of its own (activities/webhook_targets.py): one
tenant's receivers on names whose DNS hangs hold back none of another tenant's deliveries, and
what that tenant's lookups, running or hung, may pile up to is bounded, past which its new ones
are refused at once. A subscription the API refuses anyway has no name looked up."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import threading
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.exceptions import ApplicationError

from activities import webhook_targets
from activities.webhook_signing import new_secret
from activities.webhook_targets import TargetRefused, pinned
from activities.webhook_types import DeliverInput, DeliverySettings
from activities.webhooks import WebhookActivities
from api.routers.events import MAX_POSITION
from core.settings import Settings
from store.db import transaction
from store.repositories import WebhookSubscriptionRepository
from tests.conftest import TokenFactory, free_port
from tests.helpers.deadline import UNBOUNDED, eventually
from tests.helpers.outbox_events import state_changed
from tests.helpers.receiver import Receiver
from tests.helpers.stack import serve

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
    monkeypatch.setattr(socket, "getaddrinfo", _resolver(release, looked_up))
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
                    event=state_changed(tenant_id, position),
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


async def test_a_tenants_burst_of_names_that_hang_takes_no_more_than_its_share_of_lookups(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only a tenant's lookups past their 5 s counted against it: within them, one tenant (its
    admin creating subscriptions to unique names that hang) started as many lookups as the
    process runs, and every tenant's lookups in that process were refused until the resolver
    gave up on those names."""
    tenant, other = (f"tenant-{uuid.uuid4().hex[:8]}" for _ in range(2))
    release = threading.Event()
    looked_up: list[str] = []
    monkeypatch.setattr(socket, "getaddrinfo", _resolver(release, looked_up))
    # No lookup passes its bound while the test runs, however slow the machine: what refuses
    # the tenant's names is the count of its lookups running, none of them hung yet.
    monkeypatch.setattr(webhook_targets, "RESOLVE_SECONDS", 10 * UNBOUNDED)
    most = webhook_targets.TENANT_LOOKUPS
    names = [f"burst{i}{HANGS}" for i in range(webhook_targets.PROCESS_LOOKUPS)]
    attempts = [
        asyncio.ensure_future(pinned(f"http://{name}/hook", LOOPBACK, tenant=tenant))
        for name in names
    ]
    try:
        # Each attempt is either refused or the lookup of its name, running.
        await eventually(lambda: sum(a.done() for a in attempts) + _running(tenant) >= len(names))
        assert _running(tenant) == most
        for refused in [a for a in attempts if a.done()]:
            with pytest.raises(TargetRefused, match=f"not looked up: {most} of this tenant"):
                refused.result()
        # The other tenant's receiver is looked up and answers meanwhile.
        answered = await asyncio.wait_for(
            pinned("http://receiver.test:8080/hook", LOOPBACK, tenant=other), UNBOUNDED
        )
        assert answered.urls == ["http://127.0.0.1:8080/hook"]
    finally:
        release.set()
    for ended in await asyncio.gather(*attempts, return_exceptions=True):
        assert isinstance(ended, TargetRefused), ended
    await eventually(lambda: not _running(tenant))
    assert len(set(names) & set(looked_up)) == most


async def test_a_tenant_at_its_cap_of_subscriptions_has_no_name_looked_up(
    settings: Settings, token_for: TokenFactory, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The receiver's name was looked up before the tenant's subscriptions were counted: an
    admin at its cap still had a lookup, a thread, started for each request (by the hundred,
    at the API's rate limit), each refused only then, with a 409."""
    bodies = [
        {"url": "http://127.0.0.1:9/hook"},  # an address: nothing to look up; the cap is one
        {"url": f"http://full{HANGS}/hook"},
        {"url": "http://full.test/hook"},
    ]
    answers, looked_up = await _created(settings, token_for, tenant, monkeypatch, bodies)
    assert [a.status_code for a in answers] == [201, 409, 409], [a.text for a in answers]
    assert all("MAX_SUBSCRIPTIONS_PER_TENANT" in a.json()["detail"] for a in answers[1:])
    assert looked_up == []


async def test_a_subscription_starting_past_the_feed_has_no_name_looked_up(
    settings: Settings, token_for: TokenFactory, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As at the cap: refused whatever its URL, so its name is not looked up first."""
    past = {"url": f"http://past{HANGS}/hook", "startAfter": MAX_POSITION}
    [late], looked_up = await _created(settings, token_for, tenant, monkeypatch, [past])
    assert late.status_code == 422, late.text
    assert late.json()["errors"][0]["field"] == "body.startAfter", late.text
    assert looked_up == []


async def _created(
    settings: Settings,
    token_for: TokenFactory,
    tenant: str,
    monkeypatch: pytest.MonkeyPatch,
    bodies: list[dict[str, Any]],
) -> tuple[list[httpx.Response], list[str]]:
    """The API's answers to `tenant` creating a subscription with each of `bodies` in turn,
    with a cap of one, and the `.test` names looked up meanwhile."""
    release = threading.Event()
    looked_up: list[str] = []
    monkeypatch.setattr(socket, "getaddrinfo", _resolver(release, looked_up))
    # Short, so that a run without the fix answers soon (a 422: the name did not resolve).
    monkeypatch.setattr(webhook_targets, "RESOLVE_SECONDS", 1.0)
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    own = settings.model_copy(update={"webhook_max_subscriptions_per_tenant": 1})
    answers: list[httpx.Response] = []
    async with (
        serve(own) as api,
        httpx.AsyncClient(base_url=api.url, headers=auth, timeout=UNBOUNDED) as http,
    ):
        try:
            for body in bodies:
                answers.append(await http.post("/factory/webhook-subscriptions", json=body))
        finally:
            release.set()
    return answers, [host for host in looked_up if host.endswith(".test")]


def _resolver(release: threading.Event, looked_up: list[str]) -> Callable[..., Any]:
    """A getaddrinfo noting each host asked for: names under HANGS never answer (until
    `release`), other `.test` names resolve to loopback, the rest as they do."""
    real = socket.getaddrinfo

    def getaddrinfo(host: str, port: Any, *args: Any, **kwargs: Any) -> Any:
        looked_up.append(host)
        if host.endswith(HANGS):
            release.wait(UNBOUNDED)  # a resolver that never answers
            raise socket.gaierror(socket.EAI_AGAIN, "no answer")
        return real("127.0.0.1" if host.endswith(".test") else host, port, *args, **kwargs)

    return getaddrinfo


def _running(tenant: str) -> int:
    """The lookups `tenant` started that are still running."""
    with webhook_targets._LOOKUPS_LOCK:
        return sum(1 for lookup in webhook_targets._LOOKUPS.values() if lookup.tenant == tenant)


async def _subscription(
    sessions: async_sessionmaker[AsyncSession], tenant_id: str, url: str, secret: str
) -> str:
    async with transaction(sessions) as session:
        row = WebhookSubscriptionRepository(session, tenant_id).add(
            url=url, signing_secret=secret, event_types=[], delivered_position=0
        )
    return str(row.subscription_id)
