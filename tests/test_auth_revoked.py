"""A token outlives neither its client's disabling nor its re-keying (api/client_states.py).

Checked at sign-in only, a client disabled, or re-keyed with `clients create --rotate` ("the
old one stops working"), kept working with every token minted before, up to
AUTH_TOKEN_TTL_SECONDS (an hour by default), console sessions included. Each request's token is
now checked against the client's state, read at most once per HELD_SECONDS per client."""

from __future__ import annotations

import uuid

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api import client_states
from core.local_ports import free_port
from core.settings import Settings
from domain.enums import Role, Scope
from store.clients import create_client, upsert_client
from store.db import transaction
from store.tables import OAuthClient
from tests.helpers.browser import ConsoleSession
from tests.helpers.deadline import eventually
from tests.helpers.stack import serve

# The state's bound, shortened for the test (30 s in production): the old token must be
# refused within it and the poll's own margin.
HELD_S = 1.0
GRANT = {"grant_type": "client_credentials"}
ROLES, SCOPES = [Role.OPERATOR], [Scope.MODELS_READ, Scope.MODELS_ADMIN]


def _own(settings: Settings) -> Settings:
    """An API of its own without Temporal: the routes used read the store only."""
    return settings.model_copy(
        update={
            "temporal_address": f"127.0.0.1:{free_port()}",
            "temporal_connect_timeout_seconds": 1.0,
        }
    )


async def _client(sessions: async_sessionmaker[AsyncSession], tenant: str) -> tuple[str, str]:
    client_id, secret = f"rev-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    await upsert_client(
        sessions, tenant_id=tenant, client_id=client_id, secret=secret, roles=ROLES, scopes=SCOPES
    )
    return client_id, secret


async def _bearer(http: httpx.AsyncClient, client_id: str, secret: str) -> dict[str, str]:
    minted = await http.post("/oauth/token", data=GRANT, auth=(client_id, secret))
    assert minted.status_code == 200, minted.text
    return {"Authorization": f"Bearer {minted.json()['access_token']}"}


async def _status(http: httpx.AsyncClient, auth: dict[str, str]) -> int:
    return (await http.get("/factory/model-profiles", headers=auth)).status_code


async def test_a_disabled_clients_tokens_and_console_session_stop_working(
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(client_states, "HELD_SECONDS", HELD_S)
    client_id, secret = await _client(sessions, tenant)
    async with serve(_own(settings)) as api, httpx.AsyncClient(base_url=api.url) as http:
        auth = await _bearer(http, client_id, secret)
        assert await _status(http, auth) == 200
        console, signed = await ConsoleSession.sign_in(api.url, client_id, secret)
        assert signed.status_code == 303, signed.text
        assert (await console.get("/console")).status_code == 200
        async with transaction(sessions) as session:
            await session.execute(
                sa.update(OAuthClient)
                .where(OAuthClient.client_id == client_id)  # type: ignore[arg-type]
                .values(disabled=True)
            )

        async def refused() -> bool:
            return await _status(http, auth) == 401

        await eventually(refused, timeout=HELD_S + 10)
        page = await console.get("/console")
        assert page.status_code == 303, page.text[:300]  # signed in again, which it cannot
        assert page.headers["location"].startswith("/console/sign-in")
        assert (
            await http.post("/oauth/token", data=GRANT, auth=(client_id, secret))
        ).status_code == 401
        await console.close()


async def test_a_re_keyed_clients_old_tokens_stop_working_and_its_new_ones_work_at_once(
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(client_states, "HELD_SECONDS", HELD_S)
    client_id, secret = await _client(sessions, tenant)
    async with serve(_own(settings)) as api, httpx.AsyncClient(base_url=api.url) as http:
        old = await _bearer(http, client_id, secret)
        assert await _status(http, old) == 200  # the client's state is now held
        new_secret = uuid.uuid4().hex
        # What `model-router clients create --rotate` does.
        written = await create_client(
            sessions,
            tenant_id=tenant,
            client_id=client_id,
            secret=new_secret,
            roles=ROLES,
            scopes=SCOPES,
            rotate=True,
        )
        assert written.rekeyed
        fresh = await _bearer(http, client_id, new_secret)
        # Minted after the held state was read: it is read again, not refused from it.
        assert await _status(http, fresh) == 200

        async def refused() -> bool:
            return await _status(http, old) == 401

        await eventually(refused, timeout=HELD_S + 10)
        assert await _status(http, fresh) == 200
        stale = await http.post("/oauth/token", data=GRANT, auth=(client_id, secret))
        assert stale.status_code == 401


async def test_a_clients_state_is_read_once_for_many_requests(
    settings: Settings, sessions: async_sessionmaker[AsyncSession], tenant: str
) -> None:
    """The check is on the invoke path: no database round trip per request."""
    client_id, secret = await _client(sessions, tenant)
    async with serve(_own(settings)) as api, httpx.AsyncClient(base_url=api.url) as http:
        auth = await _bearer(http, client_id, secret)
        states = client_states.states_of(api.app.state.runtime)
        before = states.reads
        for _ in range(20):
            assert await _status(http, auth) == 200
        assert states.reads - before == 1


async def test_seeding_the_same_secret_again_is_no_re_key(
    sessions: async_sessionmaker[AsyncSession], tenant: str
) -> None:
    # `make dev`, the benchmarks and the tests seed their clients on every run: hashed again
    # (a new salt), the same secret named another credential, and a developer's exported
    # token or a running load generator's stopped working within HELD_SECONDS.
    client_id, secret = await _client(sessions, tenant)

    async def stored() -> str:
        async with sessions() as session:
            found = await session.get(OAuthClient, client_id)
            assert found is not None
            return found.secret_hash

    first = await stored()
    await upsert_client(
        sessions, tenant_id=tenant, client_id=client_id, secret=secret, roles=ROLES, scopes=SCOPES
    )
    assert await stored() == first
    await upsert_client(
        sessions,
        tenant_id=tenant,
        client_id=client_id,
        secret="another",
        roles=ROLES,
        scopes=SCOPES,
    )
    assert await stored() != first
