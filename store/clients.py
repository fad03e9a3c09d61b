"""Tenants and OAuth clients: creation used by the CLI, `make dev` and the tests."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from core.security import hash_secret
from domain.enums import Role, Scope
from store.db import transaction
from store.tables import OAuthClient, Tenant


async def ensure_tenant(session: AsyncSession, tenant_id: str, name: str | None = None) -> None:
    if await session.get(Tenant, tenant_id) is None:
        session.add(Tenant(tenant_id=tenant_id, name=name or tenant_id))
        await session.flush()


async def upsert_client(
    sessions: async_sessionmaker[AsyncSession],
    *,
    tenant_id: str,
    client_id: str,
    secret: str,
    roles: Iterable[Role | str],
    scopes: Iterable[Scope | str],
) -> None:
    """Create the client, or reset its secret, roles and scopes if it exists."""
    role_values = [Role(r).value for r in roles]
    scope_values = [Scope(s).value for s in scopes]
    async with transaction(sessions) as session:
        await ensure_tenant(session, tenant_id)
        client = await session.get(OAuthClient, client_id)
        if client is not None and client.tenant_id != tenant_id:
            raise ValueError(f"client {client_id!r} belongs to another tenant")
        if client is None:
            client = OAuthClient(
                client_id=client_id,
                tenant_id=tenant_id,
                secret_hash=hash_secret(secret),
                roles=role_values,
                scopes=scope_values,
            )
            session.add(client)
        else:
            client.secret_hash = hash_secret(secret)
            client.roles = role_values
            client.scopes = scope_values
            client.disabled = False
