"""OAuth2 client credentials, bearer verification, scopes and roles."""

from __future__ import annotations

import asyncio
import re
import threading
import time
import uuid

import httpx
import jwt
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api import client_auth
from core.local_ports import free_port
from core.security import hash_secret, verify_secret
from core.settings import Settings
from domain.enums import Role, Scope
from store.clients import upsert_client
from tests.conftest import TokenFactory
from tests.helpers.deadline import UNBOUNDED, eventually
from tests.helpers.stack import serve


def test_secret_hash_round_trip() -> None:
    stored = hash_secret("s3cret")
    assert "s3cret" not in stored
    assert verify_secret("s3cret", stored)
    assert not verify_secret("wrong", stored)
    assert not verify_secret("s3cret", "garbage")


async def test_token_with_basic_auth_and_with_form_credentials(
    http: httpx.AsyncClient, sessions: async_sessionmaker[AsyncSession], tenant: str
) -> None:
    await upsert_client(
        sessions,
        tenant_id=tenant,
        client_id=f"{tenant}-c",
        secret="pw-123456",
        roles=[Role.OBSERVER],
        scopes=[Scope.MODELS_READ, Scope.RUNS_READ],
    )
    basic = await http.post(
        "/oauth/token", data={"grant_type": "client_credentials"}, auth=(f"{tenant}-c", "pw-123456")
    )
    assert basic.status_code == 200, basic.text
    body = basic.json()
    assert body["token_type"] == "Bearer" and body["expires_in"] > 0
    assert set(body["scope"].split()) == {"factory.models.read", "factory.runs.read"}
    assert basic.headers["cache-control"] == "no-store"

    form = await http.post(
        "/oauth/token",
        data={
            "grant_type": "client_credentials",
            "client_id": f"{tenant}-c",
            "client_secret": "pw-123456",
            "scope": "factory.models.read",
        },
    )
    assert form.status_code == 200
    assert form.json()["scope"] == "factory.models.read"


async def test_token_endpoint_refusals(
    http: httpx.AsyncClient, sessions: async_sessionmaker[AsyncSession], tenant: str
) -> None:
    await upsert_client(
        sessions,
        tenant_id=tenant,
        client_id=f"{tenant}-r",
        secret="right-secret",
        roles=[Role.REQUESTER],
        scopes=[Scope.MODELS_READ],
    )
    wrong = await http.post(
        "/oauth/token", data={"grant_type": "client_credentials"}, auth=(f"{tenant}-r", "nope")
    )
    unknown = await http.post(
        "/oauth/token", data={"grant_type": "client_credentials"}, auth=("no-such", "nope")
    )
    # A NUL in the client id (a form's `%00`, or a Basic header's) was a 500: PostgreSQL
    # refuses it in a text value.
    nul_form = await http.post(
        "/oauth/token",
        data={"grant_type": "client_credentials", "client_id": "a\x00b", "client_secret": "x"},
    )
    nul_basic = await http.post(
        "/oauth/token", data={"grant_type": "client_credentials"}, auth=("a\x00b", "x")
    )
    for resp in (wrong, unknown, nul_form, nul_basic):
        assert resp.status_code == 401, resp.text
        assert resp.json()["error"] == "invalid_client"
        assert resp.headers["content-type"] == "application/problem+json"

    grant = await http.post(
        "/oauth/token", data={"grant_type": "password"}, auth=(f"{tenant}-r", "right-secret")
    )
    assert grant.status_code == 400 and grant.json()["error"] == "unsupported_grant_type"

    scope = await http.post(
        "/oauth/token",
        data={"grant_type": "client_credentials", "scope": "factory.models.admin"},
        auth=(f"{tenant}-r", "right-secret"),
    )
    assert scope.status_code == 400 and scope.json()["error"] == "invalid_scope"

    missing = await http.post("/oauth/token", data={})
    assert missing.status_code == 400 and missing.json()["error"] == "invalid_request"
    assert "grant_type" in missing.json()["error_description"]


async def test_no_token_invalid_token_and_expired_token_are_401(
    http: httpx.AsyncClient, settings: Settings
) -> None:
    assert settings.auth_jwt_secret is not None
    key = settings.auth_jwt_secret.get_secret_value()
    now = int(time.time())
    expired = jwt.encode(
        {
            "iss": settings.auth_issuer,
            "aud": settings.auth_audience,
            "sub": "c",
            "tid": "t",
            "iat": now - 7200,
            "exp": now - 3600,
            "scope": "factory.models.read",
        },
        key,
        algorithm="HS256",
    )
    forged = jwt.encode(
        {
            "iss": settings.auth_issuer,
            "aud": settings.auth_audience,
            "sub": "c",
            "tid": "t",
            "iat": now,
            "exp": now + 60,
            "scope": "factory.models.read",
        },
        "not-the-key-not-the-key-not-the-key",
        algorithm="HS256",
    )
    for headers in (
        {},
        {"Authorization": "Bearer garbage"},
        {"Authorization": f"Bearer {expired}"},
        {"Authorization": f"Bearer {forged}"},
        {"Authorization": "Basic abc"},
    ):
        resp = await http.get("/factory/model-profiles", headers=headers)
        assert resp.status_code == 401, headers
        assert resp.headers["www-authenticate"].startswith("Bearer")
        assert resp.headers["content-type"] == "application/problem+json"


def _signed(settings: Settings, tenant: str, **claims: object) -> str:
    assert settings.auth_jwt_secret is not None
    now = int(time.time())
    base = {
        "iss": settings.auth_issuer,
        "aud": settings.auth_audience,
        "sub": "c",
        "tid": tenant,
        "iat": now,
        "exp": now + 600,
    }
    return jwt.encode(
        {**base, **claims}, settings.auth_jwt_secret.get_secret_value(), algorithm="HS256"
    )


@pytest.mark.parametrize(
    "claims",
    [
        {"roles": 7, "scope": "factory.models.read"},
        {"roles": [["Observer"]], "scope": "factory.models.read"},
        {"roles": ["Observer"], "scope": {"read": True}},
        {"roles": ["Observer"], "scope": ["factory.models.read", 3]},
    ],
)
async def test_a_signed_token_with_malformed_roles_or_scope_is_a_401_not_a_500(
    http: httpx.AsyncClient, settings: Settings, tenant: str, claims: dict[str, object]
) -> None:
    """The limits middleware reads every request's token, so a TypeError here was a 500 on
    every route the token reached, liveness included."""
    auth = {"Authorization": f"Bearer {_signed(settings, tenant, **claims)}"}
    resp = await http.get("/factory/model-profiles", headers=auth)
    assert resp.status_code == 401, resp.text
    assert (await http.get("/healthz", headers=auth)).status_code == 200


async def test_null_roles_are_none_and_a_list_scope_is_its_scopes(
    http: httpx.AsyncClient, settings: Settings, tenant: str
) -> None:
    """An IdP that maps a user with no roles to `"roles": null` gets the 403 of no role; one
    that sends `scope` as a list (Okta, Azure) gets those scopes, not the list's repr."""
    nothing = _signed(settings, tenant, roles=None, scope="factory.models.read")
    resp = await http.get("/factory/model-profiles", headers={"Authorization": f"Bearer {nothing}"})
    assert resp.status_code == 403, resp.text
    listed = _signed(settings, tenant, roles=["Observer"], scope=["factory.models.read"])
    resp = await http.get("/factory/model-profiles", headers={"Authorization": f"Bearer {listed}"})
    assert resp.status_code == 200, resp.text


async def test_missing_scope_is_403_and_missing_role_is_403(
    http: httpx.AsyncClient, token_for: TokenFactory, tenant: str
) -> None:
    read_only = await token_for(tenant, roles=[Role.PLATFORM_ADMIN], scopes=[Scope.MODELS_READ])
    resp = await http.get(
        "/factory/model-deployments", headers={"Authorization": f"Bearer {read_only}"}
    )
    assert resp.status_code == 403
    assert resp.json()["requiredScope"] == "factory.models.admin"

    requester = await token_for(tenant, roles=[Role.REQUESTER], scopes=list(Scope))
    resp = await http.get(
        "/factory/model-deployments", headers={"Authorization": f"Bearer {requester}"}
    )
    assert resp.status_code == 403
    assert "roles" in resp.json()["detail"]

    observer = await token_for(tenant, roles=[Role.OBSERVER], scopes=list(Scope))
    auth = {"Authorization": f"Bearer {observer}"}
    assert (await http.get("/factory/model-deployments", headers=auth)).status_code == 200
    register = await http.post("/factory/model-deployments", headers=auth, json={})
    assert register.status_code == 403  # authorization is decided before the body is read


async def test_secret_checks_run_two_at_a_time_however_many_ask(
    sessions: async_sessionmaker[AsyncSession], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each scrypt takes 16 MiB and tens of ms of a core, for anyone (an unknown client is
    # checked against a dummy hash): a burst of bad sign-ins ran 40 at once on anyio's shared
    # thread pool, some 640 MiB against the API pod's 768 MiB. The count is taken around the
    # real check.
    running, most = [0], [0]
    lock = threading.Lock()

    def counted(secret: str, stored: str) -> bool:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        try:
            return verify_secret(secret, stored)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(client_auth, "verify_secret", counted)

    async def bad_sign_in() -> None:
        assert await client_auth.authenticate(sessions, "nobody", "nothing") is None

    await asyncio.gather(*(bad_sign_in() for _ in range(12)))
    assert 1 <= most[0] <= client_auth.SECRET_CHECKS.limiter.total_tokens == 2


# The pool's wait for a free connection, shortened for the test (tests/test_pool_timeout.py):
# without it a read starved of a connection fails only after SQLAlchemy's 30 s.
POOL_TIMEOUT_S = 0.5


async def test_a_flood_of_bad_sign_ins_holds_no_connection_and_its_overflow_is_a_503(
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """~100 bad POST /oauth/token a second held one pooled connection each while they waited
    for a secret check (two at a time, ~40 ms each): the pool ran dry and every tenant's reads
    waited 30 s and failed. Now the client is read on a session of its own, returned before
    the wait, and past a bounded line a sign-in is told at once to come back."""
    client_id, secret = f"flood-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    await upsert_client(
        sessions,
        tenant_id=tenant,
        client_id=client_id,
        secret=secret,
        roles=[Role.OBSERVER],
        scopes=[Scope.MODELS_READ],
    )
    own = settings.model_copy(
        update={
            # A pool of one, and (store/db.py: overflow = pool size) one more past it.
            "database_pool_size": 1,
            # An API of its own without Temporal: the routes used read the store only.
            "temporal_address": f"127.0.0.1:{free_port()}",
            "temporal_connect_timeout_seconds": 1.0,
        }
    )
    released, lock = threading.Event(), threading.Lock()
    running = [0]

    def held_check(secret: str, stored: str) -> bool:
        with lock:
            running[0] += 1
        released.wait(UNBOUNDED)
        return verify_secret(secret, stored)

    bad = {"grant_type": "client_credentials", "client_id": "nobody", "client_secret": "wrong"}
    async with serve(own) as api, httpx.AsyncClient(base_url=api.url, timeout=30) as http:
        minted = await http.post(
            "/oauth/token", data={"grant_type": "client_credentials"}, auth=(client_id, secret)
        )
        auth = {"Authorization": f"Bearer {minted.json()['access_token']}"}
        api.app.state.runtime.engine.pool._timeout = POOL_TIMEOUT_S
        monkeypatch.setattr(client_auth, "verify_secret", held_check)

        def more(count: int) -> list[asyncio.Task[httpx.Response]]:
            return [asyncio.create_task(http.post("/oauth/token", data=bad)) for _ in range(count)]

        flood = more(8)
        try:
            await eventually(lambda: running[0] >= 2)
            # Both checks taken and sign-ins waiting: another tenant's read is served.
            served = await http.get("/factory/model-profiles", headers=auth)
            assert served.status_code == 200, served.text
            checks = client_auth.SECRET_CHECKS
            line = int(checks.limiter.total_tokens) + checks.waiting
            flood += more(line - len(flood))
            await eventually(lambda: checks.taken == line)
            over = await http.post("/oauth/token", data=bad)
            assert over.status_code == 503, over.text
            assert over.headers["content-type"] == "application/problem+json"
            assert over.json()["error"] == "temporarily_unavailable"
            assert int(over.headers["retry-after"]) >= 1
            # The console's sign-in is behind the same line: its page says so.
            form = await http.get("/console/sign-in")
            nonce = re.search(r'name="login_nonce" value="([^"]*)"', form.text)
            assert nonce is not None
            page = await http.post(
                "/console/sign-in",
                data={"client_id": "nobody", "client_secret": "x", "login_nonce": nonce[1]},
            )
            assert page.status_code == 503 and "Too many sign-ins at once" in page.text
            assert int(page.headers["retry-after"]) >= 1
        finally:
            released.set()
        answers = await asyncio.gather(*flood)
    assert [a.status_code for a in answers] == [401] * line
