"""Checking an OAuth client's id and secret: one rule for the token endpoint and the console's
sign-in, so both accept exactly the same clients."""

from __future__ import annotations

from anyio import to_thread
from sqlalchemy.ext.asyncio import AsyncSession

from core.security import verify_secret
from store.repositories import find_client
from store.tables import OAuthClient

# Verifying against a fixed hash for unknown clients keeps response time from telling
# which client ids exist.
_DUMMY_HASH = "scrypt$AAAAAAAAAAAAAAAAAAAAAA==$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="


async def authenticate(session: AsyncSession, client_id: str, secret: str) -> OAuthClient | None:
    """The enabled client whose secret this is, or None (unknown, disabled or wrong secret)."""
    # No client id holds a NUL, and PostgreSQL refuses one in a text value: the lookup was a
    # 500 to an unauthenticated caller (a form body's `%00`, or a Basic header's). Unknown.
    client = None if "\x00" in client_id else await find_client(session, client_id)
    stored = client.secret_hash if client and not client.disabled else _DUMMY_HASH
    valid = await to_thread.run_sync(verify_secret, secret, stored)
    if client is None or client.disabled or not valid:
        return None
    return client
