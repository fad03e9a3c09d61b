"""The outbox relay: a cursor feed, and webhooks delivered at least once and in order even
across a receiver outage."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from datetime import timedelta
from typing import Any, cast

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlmodel import col, select
from temporalio.client import Client

from activities.webhook_runs import restart_stopped_deliveries
from activities.webhook_types import workflow_id
from core import metrics
from core.settings import Settings
from domain.enums import Role, Scope
from store.columns import utcnow
from store.db import transaction
from store.outbox_horizon import MARGIN_SECONDS, HorizonHidden, settled_or_hidden, settled_position
from store.repositories import OutboxRepository
from store.tables import OutboxEventRow
from store.webhook_tables import WebhookSubscriptionRow
from tests.conftest import TokenFactory, free_port
from tests.helpers.catalog import profile_event, publish, register
from tests.helpers.deadline import eventually
from tests.helpers.receiver import Receiver
from tests.helpers.stack import serve


@pytest.fixture
async def auth(token_for: TokenFactory, tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {await token_for(tenant)}"}


async def test_cursor_feed_pages_in_order_as_cloudevents(
    http: httpx.AsyncClient, auth: dict[str, str], token_for: TokenFactory, tenant: str
) -> None:
    for i in range(3):
        await register(http, auth, f"feed/{i}")

    async def all_three_readable() -> bool:  # about a second after: store/outbox_horizon.py
        return len((await http.get("/factory/events", headers=auth)).json()["events"]) == 3

    await eventually(all_three_readable, timeout=10, interval=0.1)
    first = (await http.get("/factory/events?limit=2", headers=auth)).json()
    assert [e["subject"] for e in first["events"]] == ["feed/0", "feed/1"]
    event = first["events"][0]
    assert event["specversion"] == "1.0" and event["source"] == "model-router"
    assert event["type"] == "model-access.deployments.v1.deployment-state-changed"
    assert event["data"]["toState"] == "Candidate"
    rest = (await http.get(f"/factory/events?after={first['nextAfter']}", headers=auth)).json()
    assert [e["subject"] for e in rest["events"]] == ["feed/2"]
    done = (await http.get(f"/factory/events?after={rest['nextAfter']}", headers=auth)).json()
    assert done == {"events": [], "nextAfter": rest["nextAfter"]}

    other = {"Authorization": f"Bearer {await token_for(tenant + '-x')}"}
    assert (await http.get("/factory/events", headers=other)).json()["events"] == []
    bad = await http.get("/factory/events?after=-1", headers=auth)
    assert bad.status_code == 422 and bad.json()["errors"][0]["field"] == "query.after"


async def test_webhook_receiver_down_then_back_gets_every_event_in_order(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    receiver = Receiver(port=free_port())
    await receiver.start()
    created = await http.post(
        "/factory/webhook-subscriptions", json={"url": receiver.url}, headers=auth
    )
    assert created.status_code == 201, created.text
    receiver.secret = created.json()["signingSecret"]
    listed = (await http.get("/factory/webhook-subscriptions", headers=auth)).json()
    assert "signingSecret" not in listed[0]

    await register(http, auth, "hook/a")
    await eventually(lambda: len(receiver.received) == 1)

    # Down: the receiver answers 503 while events keep happening …
    failures_before = metrics.webhook_delivery_failures.value({"tenant": tenant})
    receiver.failing = True
    await register(http, auth, "hook/b")
    await publish(http, auth, profile_event("hooked", ["hook/a"]))
    await eventually(lambda: receiver.refused_while_failing >= 2)

    async def subscription() -> dict[str, Any]:
        [listed] = (await http.get("/factory/webhook-subscriptions", headers=auth)).json()
        return cast(dict[str, Any], listed)

    async def shown_failing() -> bool:  # every attempt is retried in order: later events wait
        sub = await subscription()
        return sub["failedAttempts"] >= 2 and sub["lastError"] == "receiver answered 503"

    await eventually(shown_failing)
    assert (await subscription())["failingSince"] is not None
    # … then it is gone altogether (connection refused) …
    await receiver.stop()
    await register(http, auth, "hook/c")
    await http.post("/factory/model-deployments/hook/b/retire", headers=auth)
    # … and comes back.
    receiver.failing = False
    await receiver.start()

    async with sessions() as s:
        rows = (
            await s.scalars(
                select(OutboxEventRow)
                .where(col(OutboxEventRow.tenant_id) == tenant)
                .order_by(col(OutboxEventRow.position))
            )
        ).all()
    expected = [str(r.event_id) for r in rows]
    assert len(expected) == 5

    def delivered() -> list[str]:
        seen: list[str] = []
        for e in receiver.received:
            if e["id"] not in seen:
                seen.append(e["id"])
        return seen

    await eventually(lambda: delivered() == expected, timeout=30)
    assert receiver.bad_signatures == 0

    async def shown_recovered() -> bool:
        sub = await subscription()
        return (sub["failingSince"], sub["failedAttempts"], sub["lastError"]) == (None, 0, None)

    await eventually(shown_recovered)
    assert metrics.webhook_delivery_failures.value({"tenant": tenant}) > failures_before
    # Order holds per aggregate (here: globally), duplicates only as repeats of the last one.
    positions = [int(e["sequence"]) for e in receiver.received]
    assert positions == sorted(positions)
    await receiver.stop()


async def test_a_subscription_whose_delivery_is_gone_is_started_again_from_its_cursor(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    temporal_client: Client,
) -> None:
    """A subscription listed active with no delivery running (its workflow terminated by an
    operator, an API killed between storing it and starting it, histories lost) got nothing,
    and never showed as failing. The worker's upkeep starts it again from its cursor: the
    events written meanwhile are delivered, the ones delivered before are not sent again."""
    receiver = Receiver(port=free_port())
    await receiver.start()
    try:
        created = await http.post(
            "/factory/webhook-subscriptions", json={"url": receiver.url}, headers=auth
        )
        assert created.status_code == 201, created.text
        receiver.secret = created.json()["signingSecret"]
        await register(http, auth, "gone/a")
        await eventually(lambda: len(receiver.received) == 1)

        async def cursor_moved() -> bool:  # what the run recorded as delivered
            [listed] = (await http.get("/factory/webhook-subscriptions", headers=auth)).json()
            return bool(listed["deliveredPosition"] >= int(receiver.received[0]["sequence"]))

        await eventually(cursor_moved)
        sub = created.json()["subscriptionId"]
        await temporal_client.get_workflow_handle(workflow_id(tenant, sub)).terminate()
        await register(http, auth, "gone/b")

        assert await restart_stopped_deliveries(temporal_client, settings, sessions, [tenant]) == 1
        await eventually(lambda: len(receiver.received) >= 2, timeout=30)
        assert [e["subject"] for e in receiver.received] == ["gone/a", "gone/b"]
        # A running one is left as it is: the same run goes on.
        handle = temporal_client.get_workflow_handle(workflow_id(tenant, sub))
        running = (await handle.describe()).run_id
        await restart_stopped_deliveries(temporal_client, settings, sessions, [tenant])
        assert (await handle.describe()).run_id == running
    finally:
        await receiver.stop()


async def test_the_feed_and_webhooks_go_on_past_32_bit_positions(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    # The outbox's BIGSERIAL passes 2**31 - 1 after about four months at 100 calls/s. Its keys
    # were declared Integer, so asyncpg bound the cursor as `::INTEGER` and both the feed's
    # next page and the webhook's next delivery failed there. (Each xdist worker has its own
    # database, so the jump reaches no other worker's events.)
    past = 2**31 + 10
    seq = "pg_get_serial_sequence('outbox_events', 'position')"
    async with sessions() as s:
        await s.execute(sa.text(f"SELECT setval({seq}, GREATEST(nextval({seq}), {past}))"))
        await s.commit()

    receiver = Receiver(port=free_port())
    await receiver.start()
    created = await http.post(
        "/factory/webhook-subscriptions", json={"url": receiver.url}, headers=auth
    )
    assert created.status_code == 201, created.text
    receiver.secret = created.json()["signingSecret"]
    await register(http, auth, "wide/a")
    await eventually(lambda: len(receiver.received) >= 1)
    await register(http, auth, "wide/b")
    await eventually(lambda: len({e["id"] for e in receiver.received}) == 2, timeout=30)
    await receiver.stop()
    delivered = sorted({int(e["sequence"]) for e in receiver.received})
    assert delivered[0] > 2**31

    page = (await http.get("/factory/events", headers=auth)).json()
    assert [e["subject"] for e in page["events"]] == ["wide/a", "wide/b"]
    assert [int(e["sequence"]) for e in page["events"]] == delivered
    after_first = await http.get(f"/factory/events?after={delivered[0]}", headers=auth)
    assert after_first.status_code == 200, after_first.text
    assert [e["subject"] for e in after_first.json()["events"]] == ["wide/b"]
    done = (await http.get(f"/factory/events?after={page['nextAfter']}", headers=auth)).json()
    assert done == {"events": [], "nextAfter": page["nextAfter"]}
    later = await http.post(
        "/factory/webhook-subscriptions",
        json={"url": receiver.url, "startAfter": delivered[-1]},
        headers=auth,
    )
    assert later.status_code == 201, later.text
    assert later.json()["deliveredPosition"] == delivered[-1]
    # Past the end of the feed, events up to it would be passed over as they came: refused.
    async with sessions() as s:
        end = int(await s.scalar(sa.text("SELECT max(position) FROM outbox_events")) or 0)
    beyond = await http.post(
        "/factory/webhook-subscriptions",
        json={"url": receiver.url, "startAfter": end + 1_000},
        headers=auth,
    )
    assert beyond.status_code == 422 and beyond.json()["errors"][0]["field"] == "body.startAfter"


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",  # the cloud's metadata service
        "http://10.1.2.3:7233/",  # a private network the operator did not allow
        "http://[::1]:5432/",  # loopback over IPv6 (the tests allow 127.0.0.0/8 only)
        "http://0.0.0.0:8000/",
        "http://[::ffff:169.254.169.254]/",  # the same, IPv4-mapped
    ],
)
async def test_a_webhook_to_a_private_address_is_refused_and_nothing_is_stored(
    http: httpx.AsyncClient, auth: dict[str, str], url: str
) -> None:
    resp = await http.post("/factory/webhook-subscriptions", json={"url": url}, headers=auth)
    assert resp.status_code == 422, resp.text
    assert resp.json()["errors"][0]["field"] == "body.url"
    message = resp.json()["errors"][0]["message"]
    assert "not public" in message
    assert "169.254" not in message and "10.1" not in message  # no internal address told
    assert (await http.get("/factory/webhook-subscriptions", headers=auth)).json() == []


@pytest.mark.parametrize("url", [f"https://{'a' * 64}.example.com/hook", "https://a..example.com/"])
async def test_a_webhook_host_no_resolver_takes_is_a_422(
    http: httpx.AsyncClient, auth: dict[str, str], url: str
) -> None:
    """A label over 63 characters, or an empty one, passes URL parsing, and the resolver
    refuses it with a UnicodeError, not an OSError: it was a 500."""
    resp = await http.post("/factory/webhook-subscriptions", json={"url": url}, headers=auth)
    assert resp.status_code == 422, resp.text
    assert resp.json()["errors"][0]["field"] == "body.url"
    assert "does not resolve" in resp.json()["errors"][0]["message"]
    assert (await http.get("/factory/webhook-subscriptions", headers=auth)).json() == []


async def test_deleting_a_subscription_stops_delivery_and_is_tenant_scoped(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    token_for: TokenFactory,
    tenant: str,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    created = (
        await http.post(
            "/factory/webhook-subscriptions",
            json={"url": "http://127.0.0.1:9/hook", "eventTypes": ["ModelInvoked"]},
            headers=auth,
        )
    ).json()
    sub = created["subscriptionId"]
    other = {"Authorization": f"Bearer {await token_for(tenant + '-y')}"}
    assert (
        await http.delete(f"/factory/webhook-subscriptions/{sub}", headers=other)
    ).status_code == 404
    assert (await http.get("/factory/webhook-subscriptions", headers=other)).json() == []
    assert (
        await http.delete(f"/factory/webhook-subscriptions/{sub}", headers=auth)
    ).status_code == 204
    [row] = (await http.get("/factory/webhook-subscriptions", headers=auth)).json()
    assert row["active"] is False
    # Nothing signs for it again: the row keeps no key to forge its receiver's deliveries.
    await _holds_no_secret(sessions, sub)

    bad = await http.post(
        "/factory/webhook-subscriptions",
        json={"url": "ftp://x", "eventTypes": ["Nope"]},
        headers=auth,
    )
    assert bad.status_code == 422
    assert {e["field"] for e in bad.json()["errors"]} >= {"body.url", "body.eventTypes.0"}


async def test_a_page_of_events_is_delivered_in_one_activity(
    http: httpx.AsyncClient, auth: dict[str, str], tenant: str, temporal_client: Client
) -> None:
    """One activity per event held a subscription to some ten events a second (a round trip
    through Temporal each), below one tenant's ModelInvoked events at 50 calls/s."""
    for n in range(5):
        await register(http, auth, f"page/{n}")

    async def readable() -> bool:
        # Each is readable about a second after it was written (store/outbox_horizon.py): the
        # subscription, which looks every poll interval, finds the five together only then.
        page = (await http.get("/factory/events", headers=auth)).json()
        return len(page["events"]) >= 5

    await eventually(readable)
    receiver = Receiver(port=free_port())
    await receiver.start()
    try:
        created = await http.post(
            "/factory/webhook-subscriptions",
            json={"url": receiver.url, "startAfter": 0},  # the five, in its first page
            headers=auth,
        )
        assert created.status_code == 201, created.text
        receiver.secret = created.json()["signingSecret"]
        await eventually(lambda: len(receiver.received) >= 5)
    finally:
        await receiver.stop()
    handle = temporal_client.get_workflow_handle(
        workflow_id(tenant, created.json()["subscriptionId"])
    )
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        async for e in handle.fetch_history_events()
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert "webhook_deliver" not in scheduled
    assert scheduled.count("webhook_deliver_batch") == 1, scheduled


async def test_a_page_stops_at_an_event_refused_and_goes_on_in_order(
    http: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    """The page's activity stops at the first event the receiver does not take; that one is
    retried on its own, with its own backoff, and the rest follow it: none sent twice, none
    out of order (a retry of the page beside it would have sent them again, reordered)."""
    for n in range(5):
        await register(http, auth, f"stop/{n}")
    receiver = Receiver(port=free_port(), refuse_once_at=2)
    await receiver.start()
    try:
        created = await http.post(
            "/factory/webhook-subscriptions",
            json={"url": receiver.url, "startAfter": 0},
            headers=auth,
        )
        receiver.secret = created.json()["signingSecret"]
        await eventually(lambda: len(receiver.received) >= 5)
    finally:
        await receiver.stop()
    positions = [int(e["sequence"]) for e in receiver.received]
    assert positions == sorted(set(positions)) and len(positions) == 5, positions
    assert receiver.refused_while_failing == 1


async def test_a_receiver_that_answers_410_gone_ends_its_subscription(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    temporal_client: Client,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """Retried, a decommissioned receiver was called every minute, for ever; 410 is how a
    Standard Webhooks receiver says it is gone. Its cursor stops before the event refused, so
    that the subscription created again from it (`startAfter`) starts there."""
    receiver = Receiver(port=free_port(), failing=True, failing_status=410)
    await receiver.start()
    try:
        created = await http.post(
            "/factory/webhook-subscriptions", json={"url": receiver.url}, headers=auth
        )
        assert created.status_code == 201, created.text
        sub, start = created.json()["subscriptionId"], created.json()["deliveredPosition"]
        await register(http, auth, "gone/a")

        async def ended() -> bool:
            [row] = (await http.get("/factory/webhook-subscriptions", headers=auth)).json()
            return row["active"] is False and "410" in (row["lastError"] or "")

        await eventually(ended)
        handle = temporal_client.get_workflow_handle(workflow_id(tenant, sub))
        await handle.result()  # its delivery ends: nothing calls the receiver again
        assert receiver.refused_while_failing == 1
        await _stopped_before_the_event_refused(http, auth, start)
        await _holds_no_secret(sessions, sub)
    finally:
        await receiver.stop()


async def test_a_receiver_failing_for_days_has_its_subscription_ended(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    temporal_client: Client,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """A receiver gone without a 410 (a 404, a host that no longer resolves) was retried for
    ever, its subscription holding every run event of its tenant from the retention prune.
    Failing past WEBHOOK_END_AFTER_FAILING_HOURS (120), it is ended as a 410 ends it, its
    cursor before the event it failed on."""
    receiver = Receiver(port=free_port(), failing=True, failing_status=404)
    await receiver.start()
    try:
        created = await http.post(
            "/factory/webhook-subscriptions", json={"url": receiver.url}, headers=auth
        )
        assert created.status_code == 201, created.text
        sub, start = created.json()["subscriptionId"], created.json()["deliveredPosition"]
        async with transaction(sessions) as session:
            await session.execute(
                sa.update(WebhookSubscriptionRow)
                .where(col(WebhookSubscriptionRow.subscription_id) == uuid.UUID(sub))
                .values(failing_since=utcnow() - timedelta(hours=121), failed_attempts=500)
            )
        await register(http, auth, "failing/a")

        async def ended() -> dict[str, Any] | None:
            [row] = (await http.get("/factory/webhook-subscriptions", headers=auth)).json()
            return row if row["active"] is False else None

        row = await eventually(ended)
        assert "404" in row["lastError"] and "ended" in row["lastError"], row
        await temporal_client.get_workflow_handle(workflow_id(tenant, sub)).result()
        await _stopped_before_the_event_refused(http, auth, start)
        await _holds_no_secret(sessions, sub)
    finally:
        await receiver.stop()


async def _stopped_before_the_event_refused(
    http: httpx.AsyncClient, auth: dict[str, str], start: int
) -> None:
    """The ended subscription's cursor is just before the event its receiver refused (the
    tenant's first after `start`): the workflow's advance past the whole page came after the
    end, and a subscription created again from `deliveredPosition` passed that event over."""
    page = (await http.get(f"/factory/events?after={start}", headers=auth)).json()
    refused = int(page["events"][0]["sequence"])
    [row] = (await http.get("/factory/webhook-subscriptions", headers=auth)).json()
    assert row["deliveredPosition"] == refused - 1, (row, refused)


async def _holds_no_secret(sessions: async_sessionmaker[AsyncSession], sub: str) -> None:
    async with sessions() as session:
        row = await session.get(WebhookSubscriptionRow, uuid.UUID(sub))
    assert row is not None and not row.active
    assert (row.signing_secret, row.previous_signing_secret) == (None, None)


async def test_a_tenant_holds_at_most_its_share_of_subscriptions(
    settings: Settings, token_for: TokenFactory, tenant: str
) -> None:
    """Deliveries share the worker's activity slots with probes, closes and sweeps: one
    tenant's hundreds of slow receivers held them all."""
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    own = settings.model_copy(update={"webhook_max_subscriptions_per_tenant": 1})
    async with serve(own) as api, httpx.AsyncClient(base_url=api.url, headers=auth) as http:
        body = {"url": "http://127.0.0.1:9/hook"}
        first = await http.post("/factory/webhook-subscriptions", json=body)
        assert first.status_code == 201, first.text
        second = await http.post("/factory/webhook-subscriptions", json=body)
        assert second.status_code == 409, second.text
        assert "MAX_SUBSCRIPTIONS_PER_TENANT" in second.json()["detail"]
        # A deleted one no longer counts.
        gone = await http.delete(f"/factory/webhook-subscriptions/{first.json()['subscriptionId']}")
        assert gone.status_code == 204
        assert (await http.post("/factory/webhook-subscriptions", json=body)).status_code == 201


async def test_subscriptions_created_at_once_hold_no_more_than_the_share(
    settings: Settings, token_for: TokenFactory, tenant: str
) -> None:
    """The cap is counted one create at a time: eight created at once each counted the others
    as not there yet, and all eight were kept past a cap of two."""
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    own = settings.model_copy(update={"webhook_max_subscriptions_per_tenant": 2})
    async with serve(own) as api, httpx.AsyncClient(base_url=api.url, headers=auth) as http:
        body = {"url": "http://127.0.0.1:9/hook"}
        answers = await asyncio.gather(
            *(http.post("/factory/webhook-subscriptions", json=body) for _ in range(8))
        )
        assert sorted(a.status_code for a in answers) == [201] * 2 + [409] * 6, [
            a.text for a in answers
        ]
        listed = (await http.get("/factory/webhook-subscriptions")).json()
        assert len([s for s in listed if s["active"]]) == 2, listed


async def test_a_rotated_secret_signs_beside_the_old_one_until_the_overlap_ends(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    token_for: TokenFactory,
    tenant: str,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """A leaked secret could only be replaced by deleting the subscription: its receiver
    reconfigured and its cursor guessed again. A rotation signs with both secrets for its
    overlap (the receiver takes the new one up, no delivery refused meanwhile); with no overlap
    the old one stops at once. The cursor and the events under way are kept."""
    receiver = Receiver(port=free_port())
    await receiver.start()
    try:
        created = await http.post(
            "/factory/webhook-subscriptions", json={"url": receiver.url}, headers=auth
        )
        sub, first = created.json()["subscriptionId"], created.json()["signingSecret"]
        receiver.secret = first
        rotate = f"/factory/webhook-subscriptions/{sub}/rotate-secret"
        await register(http, auth, "rot/a")
        await eventually(lambda: len(receiver.received) == 1)

        rotated = await http.post(rotate, headers=auth)
        assert rotated.status_code == 200, rotated.text
        second = rotated.json()["signingSecret"]
        assert second != first and rotated.json()["previousSecretUntil"] is not None
        await register(http, auth, "rot/b")  # the receiver still has the first: it verifies
        await eventually(lambda: len(receiver.received) == 2)
        receiver.secret = second
        await register(http, auth, "rot/c")
        await eventually(lambda: len(receiver.received) == 3)

        leaked = await http.post(rotate, json={"overlapSeconds": 0}, headers=auth)
        third = leaked.json()["signingSecret"]
        async with sessions() as s:  # a leaked secret is not kept at all
            row = await s.get(WebhookSubscriptionRow, uuid.UUID(sub))
            assert row is not None and row.previous_signing_secret is None
        await register(http, auth, "rot/d")  # signed by the third alone: the second is refused
        await eventually(lambda: receiver.bad_signatures >= 1)
        receiver.secret = third
        await eventually(lambda: len(receiver.received) == 4, timeout=30)
        assert [e["subject"] for e in receiver.received] == ["rot/a", "rot/b", "rot/c", "rot/d"]

        other = {"Authorization": f"Bearer {await token_for(tenant + '-r')}"}
        assert (await http.post(rotate, headers=other)).status_code == 404
        too_long = await http.post(rotate, json={"overlapSeconds": 10**9}, headers=auth)
        assert too_long.status_code == 422
        assert too_long.json()["errors"][0]["field"] == "body.overlapSeconds"
    finally:
        await receiver.stop()


async def test_a_delivery_verifies_and_parses_with_the_standards_own_libraries(
    http: httpx.AsyncClient, auth: dict[str, str], tenant: str
) -> None:
    # The receiver verifies with `standardwebhooks` and reads the body with the CloudEvents SDK,
    # as a subscriber would: before the move to `standardwebhooks` our signature used the whole
    # secret string as the HMAC key and no Standard Webhooks library accepted it.
    receiver = Receiver(port=free_port())
    await receiver.start()
    created = await http.post(
        "/factory/webhook-subscriptions", json={"url": receiver.url}, headers=auth
    )
    receiver.secret = created.json()["signingSecret"]
    await register(http, auth, "interop/a")
    await eventually(lambda: len(receiver.events) == 1)
    await receiver.stop()
    assert receiver.bad_signatures == 0
    event = receiver.events[0]
    assert event.get_specversion() == "1.0" and event.get_source() == "model-router"
    assert event.get_type() == "model-access.deployments.v1.deployment-state-changed"
    assert event.get_subject() == "interop/a"
    at = event.get_time()
    assert at is not None and at.utcoffset() == timedelta(0)
    assert event.get_extension("tenantid") == tenant
    data = event.get_data()
    assert isinstance(data, dict) and data["toState"] == "Candidate"


async def test_a_subscription_url_longer_than_its_column_once_normalised_is_a_422(
    http: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    # 719 characters as sent, 4,219 once its non-ASCII characters are percent-encoded: the URL
    # as stored is what must fit VARCHAR(2000). It reached PostgreSQL before and was a 500.
    for url in ("http://127.0.0.1:9/" + "é" * 700, "http://127.0.0.1:9/" + "a" * 1982):
        refused = await http.post("/factory/webhook-subscriptions", json={"url": url}, headers=auth)
        assert refused.status_code == 422, refused.text
        assert refused.json()["errors"][0]["field"] == "body.url", refused.text
    assert (await http.get("/factory/webhook-subscriptions", headers=auth)).json() == []
    longest = "http://127.0.0.1:9/" + "a" * 1981  # 2,000 characters
    created = await http.post("/factory/webhook-subscriptions", json={"url": longest}, headers=auth)
    assert created.status_code == 201, created.text
    assert created.json()["url"] == longest


def _profile_event(tenant: str, aggregate: str) -> OutboxEventRow:
    return OutboxEventRow(
        tenant_id=tenant,
        event_type="ModelProfileActivated",
        topic="model-access.profiles.v1.model-profile-activated",
        aggregate_type="ModelProfile",
        aggregate_id=aggregate,
        payload={"version": "1"},
    )


def _event(tenant: str, aggregate: str) -> OutboxEventRow:
    return OutboxEventRow(
        tenant_id=tenant,
        event_type="DeploymentStateChanged",
        topic="model-access.deployments.v1",
        aggregate_type="ModelDeployment",
        aggregate_id=aggregate,
        payload={"toState": "Candidate"},
    )


async def _past_the_margin(sessions: async_sessionmaker[AsyncSession], position: int) -> None:
    """Until the row at `position` was written well over the horizon's margin ago (by the
    database's clock): by then, without its wait, a reader would have passed it."""

    async def old_enough() -> bool:
        async with sessions() as s:
            age = await s.scalar(
                sa.text(
                    "SELECT clock_timestamp() - inserted_at FROM outbox_events WHERE position = :p"
                ),
                {"p": position},
            )
        return age is not None and age > timedelta(seconds=2 * MARGIN_SECONDS)

    await eventually(old_enough, timeout=10, interval=0.1)


async def test_an_event_whose_transaction_commits_late_is_not_passed_over(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """Positions are taken at insert, not at commit. A transition holds its event's position
    while it waits on a lock, and a receipt close commits a later one meanwhile: a reader that
    returned the later one moved its cursor past the earlier, and never saw it (a webhook
    subscription's cursor reads the same way)."""

    async def feed() -> list[str]:
        page = (await http.get("/factory/events", headers=auth)).json()
        return [e["subject"] for e in page["events"]]

    async with sessions() as slow, sessions() as quick:
        early = _event(tenant, "late/early")
        slow.add(early)
        await slow.flush()  # its position is taken; its transaction stays open
        later = _event(tenant, "late/later")
        quick.add(later)
        await quick.commit()
        assert early.position is not None and later.position is not None
        assert early.position < later.position

        await _past_the_margin(sessions, later.position)
        assert await feed() == []  # the later event waits for the earlier one's transaction
        await slow.commit()

    async def both_in_order() -> bool:
        return await feed() == ["late/early", "late/later"]

    await eventually(both_in_order, timeout=10, interval=0.1)


async def test_a_writer_of_another_role_holds_readers_back_though_its_start_is_hidden(
    tenant: str, sessions: async_sessionmaker[AsyncSession], database_url: str
) -> None:
    """An API and a worker under two database roles, neither with pg_read_all_stats: each sees
    the other's sessions with their type hidden too (NULL), not only their start, and the
    filter on the type left them out. The reader passed the other role's open position, and
    its event was never read."""
    run = uuid.uuid4().hex[:8]
    writer_role, reader_role = f"outbox_writer_{run}", f"outbox_reader_{run}"
    async with sessions() as admin:
        for role in (writer_role, reader_role):
            await admin.execute(sa.text(f"CREATE ROLE {role} LOGIN"))
            await admin.execute(sa.text(f"GRANT SELECT, INSERT ON outbox_events TO {role}"))
            await admin.execute(sa.text(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {role}"))
        await admin.commit()
    url = sa.make_url(database_url)
    writer = create_async_engine(url.set(username=writer_role))
    reader = create_async_engine(url.set(username=reader_role))
    try:
        async with AsyncSession(writer) as slow, sessions() as quick:
            early = _event(tenant, "roles/early")
            slow.add(early)
            await slow.flush()  # its position taken under the writer role; still open
            later = _event(tenant, "roles/later")
            quick.add(later)
            await quick.commit()
            assert early.position is not None and later.position is not None
            await _past_the_margin(sessions, later.position)
            async with AsyncSession(reader) as reading:
                assert (await settled_position(reading) or 0) < early.position
                # A new subscription's start is not taken from it: read as 0, the subscription
                # replayed the tenant's whole history (the API answers 503 instead).
                with pytest.raises(HorizonHidden):
                    await settled_or_hidden(reading)
            await slow.commit()
        async with AsyncSession(reader) as reading:
            last = later.position

            async def past_both() -> bool:
                with contextlib.suppress(HorizonHidden):  # another test's writer, a moment
                    return (await settled_or_hidden(reading) or 0) >= last
                return False

            await eventually(past_both, timeout=10, interval=0.1)
    finally:
        await writer.dispose()
        await reader.dispose()
        async with sessions() as admin:
            for role in (writer_role, reader_role):
                await admin.execute(sa.text(f"DROP OWNED BY {role}"))
                await admin.execute(sa.text(f"DROP ROLE {role}"))
            await admin.commit()


async def test_a_reader_asking_twice_in_one_transaction_still_waits_for_a_later_writer(
    tenant: str, sessions: async_sessionmaker[AsyncSession]
) -> None:
    """PostgreSQL keeps the activity view a transaction read first: a writer begun after it is
    not in it. Without the reader's own start as a cap, the horizon asked again in the same
    transaction passed that writer's open position."""

    async with sessions() as reader, sessions() as slow, sessions() as quick:
        outbox = OutboxRepository(reader, tenant)
        assert await outbox.list_after(0) == []  # the reader's view of the activity is taken
        early = _event(tenant, "stale/early")
        slow.add(early)
        await slow.flush()  # begun after that view; its position is taken, still open
        later = _event(tenant, "stale/later")
        quick.add(later)
        await quick.commit()
        assert later.position is not None

        await _past_the_margin(sessions, later.position)
        assert await outbox.list_after(0) == []  # not the later one, ahead of the open one
        await slow.commit()


async def test_the_feed_leaves_a_runs_events_to_tokens_that_read_runs(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """ModelInvoked carries a run's receipt (its deployment, tokens, cost): a token that may
    read the catalog but not runs (no factory.runs.read) read every run's receipts here."""
    async with sessions() as session:
        session.add(_profile_event(tenant, "runs/dep"))
        invoked = OutboxEventRow(
            tenant_id=tenant,
            event_type="ModelInvoked",
            topic="model-access.invocations.v1.model-invoked",
            aggregate_type="InvocationReceipt",
            aggregate_id=str(uuid.uuid4()),
            payload={"outcome": "Completed"},
        )
        session.add(invoked)
        await session.commit()
        assert invoked.position is not None
    await _past_the_margin(sessions, invoked.position)
    catalog_only = {
        "Authorization": "Bearer " + await token_for(tenant, [Role.OBSERVER], [Scope.MODELS_READ])
    }
    both = {
        "Authorization": "Bearer "
        + await token_for(tenant, [Role.OBSERVER], [Scope.MODELS_READ, Scope.RUNS_READ])
    }
    narrow = (await http.get("/factory/events", headers=catalog_only)).json()
    assert [e["subject"] for e in narrow["events"]] == ["runs/dep"]
    assert narrow["nextAfter"] == invoked.position  # its cursor still moves past what it missed
    full = (await http.get("/factory/events", headers=both)).json()
    assert [e["subject"] for e in full["events"]][-1] == invoked.aggregate_id


async def test_a_subscriber_that_may_not_read_runs_gets_none_of_their_events(
    http: httpx.AsyncClient, token_for: TokenFactory, tenant: str
) -> None:
    """Creating a subscription needs only factory.models.admin: without factory.runs.read its
    receiver got every run's ModelInvoked, which the feed now leaves out for such a token."""
    admin_only = {
        "Authorization": "Bearer "
        + await token_for(tenant, [Role.OPERATOR], [Scope.MODELS_READ, Scope.MODELS_ADMIN])
    }
    url = f"http://127.0.0.1:{free_port()}/hook"  # never reached
    asked = await http.post(
        "/factory/webhook-subscriptions",
        json={"url": url, "eventTypes": ["ModelInvoked"]},
        headers=admin_only,
    )
    assert asked.status_code == 422, asked.text
    assert asked.json()["errors"][0]["field"] == "body.eventTypes"
    every = await http.post("/factory/webhook-subscriptions", json={"url": url}, headers=admin_only)
    assert every.status_code == 201, every.text
    types = set(every.json()["eventTypes"])
    assert "DeploymentStateChanged" in types
    assert not types & {"ModelInvoked", "RoutePlanResolved", "ModelFallbackUsed"}


async def test_the_feed_leaves_a_deployments_events_to_tokens_that_list_deployments(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """DeploymentStateChanged and CapabilityEvidenceRecorded tell what GET
    /factory/model-deployments does (state, health, evidence), which takes factory.models.admin:
    an Observer holding only factory.models.read read them all here."""
    async with sessions() as session:
        session.add(_profile_event(tenant, "deps/profile"))
        session.add(_event(tenant, "deps/state"))
        evidence = OutboxEventRow(
            tenant_id=tenant,
            event_type="CapabilityEvidenceRecorded",
            topic="model-access.deployments.v1.capability-evidence-recorded",
            aggregate_type="ModelDeployment",
            aggregate_id="deps/evidence",
            payload={"scores": {}},
        )
        session.add(evidence)
        await session.commit()
        assert evidence.position is not None
    await _past_the_margin(sessions, evidence.position)
    observer = await token_for(tenant, [Role.OBSERVER], [Scope.MODELS_READ, Scope.RUNS_READ])
    narrow = (
        await http.get("/factory/events", headers={"Authorization": f"Bearer {observer}"})
    ).json()
    assert [e["subject"] for e in narrow["events"]] == ["deps/profile"]
    assert narrow["nextAfter"] == evidence.position  # its cursor still moves past them
    # The same role with the scope GET /factory/model-deployments takes reads them.
    lister = await token_for(tenant, [Role.OBSERVER], [Scope.MODELS_READ, Scope.MODELS_ADMIN])
    auth = {"Authorization": f"Bearer {lister}"}
    assert (await http.get("/factory/model-deployments", headers=auth)).status_code == 200
    full = (await http.get("/factory/events", headers=auth)).json()
    subjects = ["deps/profile", "deps/state", "deps/evidence"]
    assert [e["subject"] for e in full["events"]] == subjects
