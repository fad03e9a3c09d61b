"""An address whose sign-ins keep failing waits before its next one (api/client_auth.py): one
address alone could otherwise keep the process's line for a secret check full, and every other
caller's sign-in was turned away with it. Only failures count, only the failing address waits,
and only while every check is taken."""

from __future__ import annotations

import asyncio
import re
import threading
import uuid

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api import client_auth
from api.client_auth import FailedSignIns
from core.local_ports import free_port
from core.security import verify_secret
from core.settings import Settings
from domain.enums import Role, Scope
from store.clients import upsert_client
from tests.helpers.deadline import UNBOUNDED, eventually
from tests.helpers.stack import serve

GRANT = {"grant_type": "client_credentials"}


def test_only_failures_drain_an_address_and_it_fills_again() -> None:
    now = [100.0]
    failures = FailedSignIns(burst=2, per_second=0.5, clock=lambda: now[0])
    assert failures.wait("a") == 0
    failures.failed("a")
    failures.failed("a")
    assert failures.wait("a") == pytest.approx(2.0)  # one back every 2 s
    assert failures.wait("b") == 0  # another address is not held up
    now[0] += 2.0
    assert failures.wait("a") == 0


async def test_an_address_failing_its_sign_ins_waits_and_no_other_does(
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client_id, secret = f"fail-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    await upsert_client(
        sessions,
        tenant_id=tenant,
        client_id=client_id,
        secret=secret,
        roles=[Role.OBSERVER],
        scopes=[Scope.MODELS_READ],
    )
    # Three failures at once, and none back within the test (a scrypt check takes ~40 ms, so
    # any refill fast enough to watch could hand one back between them); the refill itself is
    # test_only_failures_drain_an_address_and_it_fills_again's.
    monkeypatch.setattr(client_auth, "FAILURE_BURST", 3)
    monkeypatch.setattr(client_auth, "FAILURES_PER_SECOND", 0.001)
    own = settings.model_copy(
        update={
            "temporal_address": f"127.0.0.1:{free_port()}",
            "temporal_connect_timeout_seconds": 1.0,
        }
    )
    # Callers told apart by X-Forwarded-For, which the API believes from 127.0.0.1 (its
    # default FORWARDED_ALLOW_IPS), as from the proxy in front of it.
    flooding = {"X-Forwarded-For": "203.0.113.7"}
    other = {"X-Forwarded-For": "198.51.100.2"}
    holding = {"X-Forwarded-For": "192.0.2.9"}
    released = threading.Event()

    def held_check(given: str, stored: str) -> bool:
        if given == "hold":
            released.wait(UNBOUNDED)
        return verify_secret(given, stored)

    async with serve(own) as api, httpx.AsyncClient(base_url=api.url, timeout=30) as http:
        for _ in range(3):
            wrong = await http.post(
                "/oauth/token", data=GRANT, auth=("nobody", "x"), headers=flooding
            )
            assert wrong.status_code == 401, wrong.text
        # Drained, but with a check free it holds nobody up: its callers' right secrets sign
        # in (one address fronting many, a NAT or a proxy, was shut out for good).
        right = await http.post(
            "/oauth/token", data=GRANT, auth=(client_id, secret), headers=flooding
        )
        assert right.status_code == 200, right.text
        monkeypatch.setattr(client_auth, "verify_secret", held_check)
        checks = client_auth.SECRET_CHECKS
        held = [
            asyncio.create_task(
                http.post("/oauth/token", data=GRANT, auth=("nobody", "hold"), headers=holding)
            )
            for _ in range(int(checks.limiter.total_tokens))
        ]
        try:
            await eventually(checks.contended)
            # Every check taken: the drained address waits, and is told for how long.
            slowed = await http.post(
                "/oauth/token", data=GRANT, auth=("nobody", "x"), headers=flooding
            )
            assert slowed.status_code == 429, slowed.text
            assert slowed.json()["error"] == "slow_down"
            assert int(slowed.headers["retry-after"]) >= 1
            # The console's sign-in counts the same failures: its page says so.
            form = await http.get("/console/sign-in")
            nonce = re.search(r'name="login_nonce" value="([^"]*)"', form.text)
            assert nonce is not None
            page = await http.post(
                "/console/sign-in",
                data={"client_id": client_id, "client_secret": secret, "login_nonce": nonce[1]},
                headers=flooding,
            )
            assert page.status_code == 429, page.text[:300]
            assert "Too many failed sign-ins from this address" in page.text
            assert int(page.headers["retry-after"]) >= 1
            # Another address takes its place in line meanwhile.
            waiting = [
                asyncio.create_task(
                    http.post("/oauth/token", data=GRANT, auth=(client_id, secret), headers=other)
                )
                for _ in range(2)
            ]
        finally:
            released.set()
        assert [r.status_code for r in await asyncio.gather(*held)] == [401, 401]
        assert [r.status_code for r in await asyncio.gather(*waiting)] == [200, 200]
