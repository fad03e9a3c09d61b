"""Checking an OAuth client's id and secret: one rule for the token endpoint and the console's
sign-in, so both accept exactly the same clients."""

from __future__ import annotations

from anyio import CapacityLimiter, to_thread
from sqlalchemy.ext.asyncio import AsyncSession

from core.security import verify_secret
from store.repositories import find_client
from store.tables import OAuthClient

# Verifying against a fixed hash for unknown clients keeps response time from telling
# which client ids exist.
_DUMMY_HASH = "scrypt$AAAAAAAAAAAAAAAAAAAAAA==$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
# Secret checks running at once in this process. Each scrypt takes 16 MiB and tens of ms of a
# core, and anyone may ask for one (unknown clients are checked against the dummy hash): on
# anyio's shared 40-thread pool a burst of bad sign-ins held some 640 MiB against the API pod's
# 768 MiB limit, beside every stream it served, and took the threads file reads wait for.
SECRET_CHECKS = CapacityLimiter(2)


async def authenticate(session: AsyncSession, client_id: str, secret: str) -> OAuthClient | None:
    """The enabled client whose secret this is, or None (unknown, disabled or wrong secret)."""
    # No client id holds a NUL, and PostgreSQL refuses one in a text value: the lookup was a
    # 500 to an unauthenticated caller (a form body's `%00`, or a Basic header's). Unknown.
    client = None if "\x00" in client_id else await find_client(session, client_id)
    stored = client.secret_hash if client and not client.disabled else _DUMMY_HASH
    valid = await to_thread.run_sync(verify_secret, secret, stored, limiter=SECRET_CHECKS)
    if client is None or client.disabled or not valid:
        return None
    return client
