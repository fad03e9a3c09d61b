"""Tenants and OAuth clients: `clients create`'s refusing creation, the re-keying upsert
`make dev`, the benchmarks and the tests use, and the reads of a client: at sign-in, and what
its tokens are checked against (api/client_states.py)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col

from core.security import hash_secret, verify_secret
from domain.enums import Role, Scope
from store.db import transaction
from store.tables import OAuthClient, Tenant


async def ensure_tenant(session: AsyncSession, tenant_id: str, name: str | None = None) -> None:
    if await session.get(Tenant, tenant_id) is None:
        session.add(Tenant(tenant_id=tenant_id, name=name or tenant_id))
        await session.flush()


async def find_client(
    sessions: async_sessionmaker[AsyncSession], client_id: str
) -> OAuthClient | None:
    """The client, read on a session of its own: its connection is back in the pool before
    the caller goes on to wait for a secret check (api/client_auth.py)."""
    async with sessions() as session:
        return await session.get(OAuthClient, client_id)


@dataclass(frozen=True)
class ClientState:
    """What a token of the client is checked against: its tenant, whether it is disabled, and
    its stored secret's hash (a re-key replaces it)."""

    tenant_id: str
    disabled: bool
    secret_hash: str


async def client_state(
    sessions: async_sessionmaker[AsyncSession], client_id: str
) -> ClientState | None:
    """The client's state, or None when there is no such client (any more). One read by
    primary key."""
    query = sa.select(
        col(OAuthClient.tenant_id), col(OAuthClient.disabled), col(OAuthClient.secret_hash)
    ).where(col(OAuthClient.client_id) == client_id)
    async with sessions() as session:
        row = (await session.execute(query)).one_or_none()
    return None if row is None else ClientState(row.tenant_id, row.disabled, row.secret_hash)


async def upsert_client(
    sessions: async_sessionmaker[AsyncSession],
    *,
    tenant_id: str,
    client_id: str,
    secret: str,
    roles: Iterable[Role | str],
    scopes: Iterable[Scope | str],
) -> None:
    """Create the client, or reset its secret, roles and scopes (and enable it) if it exists:
    what `make dev`, the benchmarks and the tests ask for on every run. The same secret again
    is no re-key: a developer's exported token, or a running load generator's, keeps working
    across a second `make dev`."""
    await create_client(
        sessions,
        tenant_id=tenant_id,
        client_id=client_id,
        secret=secret,
        roles=roles,
        scopes=scopes,
        rotate=True,
        enable=True,
        keep_same=True,
    )


class ClientExists(Exception):
    """The client id is taken in its tenant, and re-keying it was not asked for."""


@dataclass(frozen=True)
class ClientWritten:
    """What `create_client` did: created or re-keyed the client, whether the tenant is new,
    and whether the client is disabled (a re-key keeps it so)."""

    rekeyed: bool
    new_tenant: bool
    disabled: bool


async def create_client(
    sessions: async_sessionmaker[AsyncSession],
    *,
    tenant_id: str,
    client_id: str,
    secret: str,
    roles: Iterable[Role | str],
    scopes: Iterable[Scope | str],
    rotate: bool = False,
    enable: bool = False,
    keep_same: bool = False,
) -> ClientWritten:
    """The operator's `clients create`: a new client (and its tenant, if new), or with
    `rotate` an existing client's new secret, roles and scopes. Without `rotate` an existing
    client is refused (ClientExists): re-keying it silently locked out the service using it.
    A re-key leaves a disabled client disabled (who disabled it had a reason) unless `enable`.
    With `keep_same`, a secret that is the one stored keeps its hash: hashed again (a new salt),
    every token minted with it stopped working (api/client_states.py).
    """
    role_values = [Role(r).value for r in roles]
    scope_values = [Scope(s).value for s in scopes]
    async with transaction(sessions) as session:
        # Locked: a concurrent re-key waits for this one. Two runs creating one id (or one new
        # tenant) at once both find it absent: the second meets the primary key, IntegrityError.
        client = await session.get(OAuthClient, client_id, with_for_update=True)
        if client is not None and client.tenant_id != tenant_id:
            raise ValueError(f"client {client_id!r} belongs to another tenant")
        if client is not None and not rotate:
            raise ClientExists(client_id)
        new_tenant = await session.get(Tenant, tenant_id) is None
        await ensure_tenant(session, tenant_id)
        if client is None:
            session.add(
                OAuthClient(
                    client_id=client_id,
                    tenant_id=tenant_id,
                    secret_hash=hash_secret(secret),
                    roles=role_values,
                    scopes=scope_values,
                )
            )
            return ClientWritten(rekeyed=False, new_tenant=new_tenant, disabled=False)
        if not (keep_same and verify_secret(secret, client.secret_hash)):
            client.secret_hash = hash_secret(secret)
        client.roles = role_values
        client.scopes = scope_values
        if enable:
            client.disabled = False
        return ClientWritten(rekeyed=True, new_tenant=new_tenant, disabled=client.disabled)
