"""A webhook secret's rotation inside an earlier rotation's overlap: refused, nothing changed.

A rotation signs with the new secret and the one it replaced until `previousSecretUntil`, so
that the receiver can switch. A second rotation inside that overlap replaced the first one's
secret and dropped the original at once: the receiver, still verifying with the original (it may
never have installed the first rotation's), refused every delivery until the subscription was
ended. Now it is a 409 naming the subscription and when the overlap ends, the row unchanged and
still signing with both; once the overlap has ended, a rotation is taken again. A rotation with
no overlap (a leaked secret) is taken whenever."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col
from standardwebhooks import Webhook, WebhookVerificationError
from starlette.requests import Request
from starlette.responses import Response

from activities.webhook_signing import new_secret
from api.routers.events import OVERLAP_RUNNING_TYPE
from store.columns import utcnow
from store.db import transaction
from store.repositories import OverlapRunning, WebhookSubscriptionRepository
from store.webhook_tables import WebhookSubscriptionRow
from tests.conftest import TokenFactory, free_port
from tests.helpers.catalog import register
from tests.helpers.deadline import eventually
from tests.helpers.receiver import Receiver

SUBSCRIPTIONS = "/factory/webhook-subscriptions"


@pytest.fixture
async def auth(token_for: TokenFactory, tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {await token_for(tenant)}"}


@dataclass
class Recording(Receiver):
    """The shared receiver (verifies with `secret`), keeping each delivery's body and headers
    as well, so that a test verifies one delivery with several secrets."""

    deliveries: list[tuple[bytes, dict[str, str]]] = field(default_factory=list)

    async def _hook(self, request: Request) -> Response:
        self.deliveries.append((await request.body(), dict(request.headers)))
        return await super()._hook(request)


def _verifies(secret: str, delivery: tuple[bytes, dict[str, str]]) -> bool:
    body, headers = delivery
    try:
        Webhook(secret).verify(body, headers, json_parse=False)
    except WebhookVerificationError:
        return False
    return True


async def _secrets(
    sessions: async_sessionmaker[AsyncSession], sub: str
) -> tuple[str | None, str | None, datetime | None]:
    async with sessions() as session:
        row = await session.get(WebhookSubscriptionRow, uuid.UUID(sub))
    assert row is not None
    return row.signing_secret, row.previous_signing_secret, row.previous_secret_until


async def _end_overlap(sessions: async_sessionmaker[AsyncSession], sub: str) -> None:
    """The overlap's time up, as a day later (the default overlap)."""
    async with transaction(sessions) as session:
        await session.execute(
            sa.update(WebhookSubscriptionRow)
            .where(col(WebhookSubscriptionRow.subscription_id) == uuid.UUID(sub))
            .values(previous_secret_until=utcnow() - timedelta(seconds=1))
        )


async def test_a_rotation_inside_the_overlap_is_refused_and_both_secrets_still_sign(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    receiver = Recording(port=free_port())
    await receiver.start()
    try:
        created = await http.post(SUBSCRIPTIONS, json={"url": receiver.url}, headers=auth)
        assert created.status_code == 201, created.text
        sub, original = created.json()["subscriptionId"], created.json()["signingSecret"]
        receiver.secret = original
        rotate = f"{SUBSCRIPTIONS}/{sub}/rotate-secret"

        rotated = await http.post(rotate, headers=auth)
        assert rotated.status_code == 200, rotated.text
        first = rotated.json()["signingSecret"]
        until = rotated.json()["previousSecretUntil"]
        before = await _secrets(sessions, sub)
        assert before[:2] == (first, original)

        # The receiver has not switched yet: another rotation would drop `original` at once.
        for body in (None, {"overlapSeconds": 3600}):
            again = await http.post(rotate, json=body, headers=auth)
            assert again.status_code == 409, again.text
            assert again.headers["content-type"] == "application/problem+json"
            problem = again.json()
            assert problem["type"] == OVERLAP_RUNNING_TYPE
            assert problem["field"] == "subscriptionId"
            assert problem["previousSecretUntil"] == until
            assert until in problem["detail"] and "current secret" in problem["detail"]
            assert "signingSecret" not in problem
        assert await _secrets(sessions, sub) == before  # nothing changed
        [listed] = (await http.get(SUBSCRIPTIONS, headers=auth)).json()
        assert listed["previousSecretUntil"] == until

        # Deliveries are still signed by both: the receiver on the original takes them, and
        # the same delivery verifies with the first rotation's secret too.
        await register(http, auth, "rot409/a")
        await eventually(lambda: len(receiver.received) == 1)
        assert receiver.bad_signatures == 0
        delivery = receiver.deliveries[-1]
        assert _verifies(original, delivery) and _verifies(first, delivery)
        assert not _verifies(new_secret(), delivery)

        # Once the overlap has ended a rotation is taken again; it keeps the first rotation's
        # secret beside its own (the original is long gone).
        await _end_overlap(sessions, sub)
        taken = await http.post(rotate, headers=auth)
        assert taken.status_code == 200, taken.text
        second = taken.json()["signingSecret"]
        assert (await _secrets(sessions, sub))[:2] == (second, first)
    finally:
        await receiver.stop()


async def test_an_overlap_ends_on_the_clock_and_one_of_zero_is_taken_at_any_time(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    created = await http.post(SUBSCRIPTIONS, json={"url": "http://127.0.0.1:9/hook"}, headers=auth)
    assert created.status_code == 201, created.text
    sub = created.json()["subscriptionId"]
    rotate = f"{SUBSCRIPTIONS}/{sub}/rotate-secret"

    short = await http.post(rotate, json={"overlapSeconds": 1}, headers=auth)
    assert short.status_code == 200, short.text
    statuses: list[int] = []

    async def taken() -> httpx.Response | None:
        answer = await http.post(rotate, headers=auth)
        statuses.append(answer.status_code)
        return answer if answer.status_code == 200 else None

    # Refused (409, nothing changed) until the second is up, then taken.
    after = await eventually(taken, timeout=10, interval=0.1)
    assert set(statuses) <= {409, 200} and statuses[-1] == 200, statuses
    assert (await _secrets(sessions, sub))[:2] == (
        after.json()["signingSecret"],
        short.json()["signingSecret"],
    )

    # Inside that rotation's overlap (a day), a leaked secret is replaced at once: the new
    # secret alone. With no replaced secret kept, the next rotation is taken.
    leaked = await http.post(rotate, json={"overlapSeconds": 0}, headers=auth)
    assert leaked.status_code == 200, leaked.text
    assert (await _secrets(sessions, sub))[:2] == (leaked.json()["signingSecret"], None)
    following = await http.post(rotate, headers=auth)
    assert following.status_code == 200, following.text
    assert (await _secrets(sessions, sub))[:2] == (
        following.json()["signingSecret"],
        leaked.json()["signingSecret"],
    )


async def test_rotations_at_once_take_one_and_keep_the_original(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """The check is the update's own condition: checked by a read before the write, rotations
    at once each saw no overlap and the last one's dropped the original."""
    created = await http.post(SUBSCRIPTIONS, json={"url": "http://127.0.0.1:9/hook"}, headers=auth)
    sub, original = created.json()["subscriptionId"], created.json()["signingSecret"]
    rotate = f"{SUBSCRIPTIONS}/{sub}/rotate-secret"
    answers = await asyncio.gather(*(http.post(rotate, headers=auth) for _ in range(6)))
    assert sorted(a.status_code for a in answers) == [200] + [409] * 5, [a.text for a in answers]
    [won] = [a for a in answers if a.status_code == 200]
    assert (await _secrets(sessions, sub))[:2] == (won.json()["signingSecret"], original)


async def test_the_repository_refuses_a_rotation_inside_the_overlap_on_either_engine(
    store: async_sessionmaker[AsyncSession], tenant: str
) -> None:
    """The condition in SQL, as each engine compares its timestamps (SQLite: as text)."""
    async with transaction(store) as session:
        row = WebhookSubscriptionRepository(session, tenant).add(
            url="http://127.0.0.1:9/hook",
            signing_secret="s0",
            event_types=[],
            delivered_position=0,
        )
    sub = row.subscription_id

    async def rotate(secret: str, overlap: timedelta) -> WebhookSubscriptionRow | None:
        async with transaction(store) as session:
            repo = WebhookSubscriptionRepository(session, tenant)
            return await repo.rotate_secret(sub, secret, utcnow() + overlap)

    async def held() -> tuple[str | None, str | None, datetime | None]:
        async with store() as session:
            got = await session.get(WebhookSubscriptionRow, sub)
        assert got is not None
        return got.signing_secret, got.previous_signing_secret, got.previous_secret_until

    first = await rotate("s1", timedelta(hours=1))
    assert first is not None and first.previous_secret_until is not None
    before = await held()
    with pytest.raises(OverlapRunning) as refused:
        await rotate("s2", timedelta(hours=1))
    assert refused.value.until == first.previous_secret_until
    assert await held() == before == ("s1", "s0", first.previous_secret_until)

    leaked = await rotate("s3", timedelta(0))  # a leaked secret: taken, the new one alone
    assert leaked is not None and (leaked.signing_secret, leaked.previous_signing_secret) == (
        "s3",
        None,
    )
    assert (await rotate("s4", timedelta(hours=1))) is not None
    async with transaction(store) as session:  # that overlap's time up
        got = await session.get(WebhookSubscriptionRow, sub)
        assert got is not None
        got.previous_secret_until = utcnow() - timedelta(seconds=1)
    taken = await rotate("s5", timedelta(hours=1))
    assert taken is not None and (taken.signing_secret, taken.previous_signing_secret) == (
        "s5",
        "s4",
    )

    async with transaction(store) as session:  # another tenant's, or an ended one: none
        assert (
            await WebhookSubscriptionRepository(session, tenant + "-x").rotate_secret(
                sub, "s6", utcnow() + timedelta(hours=1)
            )
            is None
        )
        assert await WebhookSubscriptionRepository(session, tenant).deactivate(sub)
    assert (await rotate("s7", timedelta(hours=1))) is None
