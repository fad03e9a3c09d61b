"""`clients create` refuses a client id that exists unless told `--rotate`: it re-keyed it
silently, locking out the service signing in with the old secret, overwriting its roles and
scopes and enabling it again if it had been disabled."""

from __future__ import annotations

import re
import uuid

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from core.settings import Settings
from store.db import transaction
from store.tables import OAuthClient
from tests.helpers.cli import run


async def _create(env: dict[str, str], tenant: str, client_id: str, *extra: str) -> tuple[int, str]:
    """The exit code, and the secret printed (or the output when there is none)."""
    result = await run(
        env,
        *("clients", "create", "--tenant", tenant, "--client-id", client_id),
        *("--role", "Operator", "--scope", "factory.models.read", *extra),
    )
    assert "Traceback" not in result.output, result.output
    found = re.search(r"^client_secret=(\S+)$", result.stdout, re.MULTILINE)
    return result.exit_code, found.group(1) if found else result.output


async def _signs_in(http: httpx.AsyncClient, client_id: str, secret: str) -> bool:
    resp = await http.post(
        "/oauth/token", data={"grant_type": "client_credentials"}, auth=(client_id, secret)
    )
    assert resp.status_code in (200, 401), resp.text
    return resp.status_code == 200


async def test_an_existing_client_is_refused_unless_rotated(
    settings: Settings, http: httpx.AsyncClient, sessions: async_sessionmaker[AsyncSession]
) -> None:
    env = {"MODEL_ROUTER_DATABASE_URL": settings.database_url}
    tenant = f"clients-{uuid.uuid4().hex[:8]}"
    client_id = f"svc-{uuid.uuid4().hex[:8]}"

    created = await run(
        env,
        *("clients", "create", "--tenant", tenant, "--client-id", client_id),
        *("--role", "Operator", "--scope", "factory.models.read"),
    )
    assert created.exit_code == 0, created.output
    # A tenant that did not exist is made, and said to be new: a typo is seen.
    assert f"created client {client_id} of new tenant {tenant}" in created.stdout
    first = re.search(r"^client_secret=(\S+)$", created.stdout, re.MULTILINE)
    assert first is not None
    old_secret = first.group(1)
    assert await _signs_in(http, client_id, old_secret)

    code, said = await _create(env, tenant, client_id)
    assert code == 2, said
    assert "exists" in said and "--rotate" in said
    assert await _signs_in(http, client_id, old_secret)  # the live service keeps working

    other = await run(
        env,
        *("clients", "create", "--tenant", tenant, "--client-id", client_id + "-2"),
        *("--role", "Operator", "--scope", "factory.models.read"),
    )
    assert other.exit_code == 0 and f"of tenant {tenant}\n" in other.stdout, other.output

    rotated = await run(
        env,
        *("clients", "create", "--tenant", tenant, "--client-id", client_id),
        *("--role", "Operator", "--scope", "factory.models.read", "--rotate"),
    )
    assert rotated.exit_code == 0, rotated.output
    assert f"re-keyed client {client_id} of tenant {tenant}" in rotated.stdout
    new = re.search(r"^client_secret=(\S+)$", rotated.stdout, re.MULTILINE)
    assert new is not None
    assert not await _signs_in(http, client_id, old_secret)
    assert await _signs_in(http, client_id, new.group(1))

    # A disabled client is re-keyed, and stays disabled: whoever disabled it had a reason.
    async with transaction(sessions) as session:
        row = await session.get(OAuthClient, client_id)
        assert row is not None
        row.disabled = True
    code, secret = await _create(env, tenant, client_id, "--rotate")
    assert code == 0, secret
    async with sessions() as session:
        row = await session.get(OAuthClient, client_id)
        assert row is not None and row.disabled
    assert not await _signs_in(http, client_id, secret)
    again = await run(
        env,
        *("clients", "create", "--tenant", tenant, "--client-id", client_id),
        *("--role", "Operator", "--scope", "factory.models.read", "--rotate"),
    )
    assert again.exit_code == 0 and "stays so" in again.stderr, again.output
