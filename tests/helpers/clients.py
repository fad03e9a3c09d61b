"""An OAuth client of a tenant with the roles and scopes a test gives it, written to the store
directly, as `model-router clients create` writes one: its id and secret, to sign in with."""

from __future__ import annotations

import uuid

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from core.security import new_client_secret
from domain.enums import Role, Scope
from store.clients import upsert_client


async def client_of(
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    role: Role,
    scopes: list[Scope] | None = None,
) -> tuple[str, str]:
    """A client with one role and, unless given, every scope."""
    client_id, secret = f"client-{uuid.uuid4().hex[:8]}", new_client_secret()
    await upsert_client(
        sessions,
        tenant_id=tenant,
        client_id=client_id,
        secret=secret,
        roles=[role],
        scopes=scopes if scopes is not None else list(Scope),
    )
    return client_id, secret
