"""Console sessions ended by their sign-out (table console_sign_outs, migration 0020).

The console's cookie holds a token valid until its `exp`; deleting the cookie on sign-out left
any copy of it (a shared workstation, a log) a working session for the rest of that lifetime.
A sign-out records the token's `jti`, and the console refuses a token whose `jti` is recorded:
one read by primary key per console request, which the console can afford and the API never
makes (a console token is no API token: core/security.py).

A row is of no use once its token has expired (every check refuses the token then), so each
sign-out also deletes up to PRUNE_BATCH rows past their expiry: rows come only from sign-outs,
so the table holds about the sign-outs of one token lifetime, with no scheduled job."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col

from store.db import transaction
from store.ops_tables import ConsoleSignOutRow
from store.upsert import upsert

# The longest `jti` recorded (the column's width). The sign-in's are UUIDs (36 characters); a
# console token whose id is longer, or that has none, cannot be ended, and is no session.
JTI_MAX = 100
# Expired rows one sign-out deletes at most.
PRUNE_BATCH = 100
# How long a row is kept past its token's expiry: PyJWT checks `exp` by each host's own clock,
# and a host running behind took a token the row was pruned of.
KEPT_PAST_EXPIRY = timedelta(minutes=5)

log = logging.getLogger(__name__)


def can_be_ended(jti: str | None) -> bool:
    """Whether a console token with this id can be recorded as signed out."""
    return jti is not None and 0 < len(jti) <= JTI_MAX


async def signed_out(sessions: async_sessionmaker[AsyncSession], jti: str) -> bool:
    """Whether the console session of this token id was signed out of. One read by primary key,
    on a session of its own."""
    query = sa.select(sa.literal(1)).where(col(ConsoleSignOutRow.jti) == jti)
    async with sessions() as session:
        return (await session.execute(query)).first() is not None


async def sign_out(
    sessions: async_sessionmaker[AsyncSession], jti: str, tenant_id: str, expires_at: datetime
) -> None:
    """Records the session as ended (a second sign-out of it changes nothing), then deletes
    rows past their expiry, each in a transaction of its own: the record stands whatever the
    prune meets."""
    async with transaction(sessions) as session:
        row = {"jti": jti, "tenant_id": tenant_id, "expires_at": expires_at}
        await upsert(session, ConsoleSignOutRow, [row], conflict=["jti"])
    try:
        async with transaction(sessions) as session:
            # Kept a while past the expiry: a host whose clock runs behind still took the token.
            await prune_expired(session, datetime.now(UTC) - KEPT_PAST_EXPIRY, PRUNE_BATCH)
    except Exception as exc:  # the sign-out is recorded; the next one prunes
        log.warning("expired console sign-outs not pruned: %s", type(exc).__name__)


async def prune_expired(session: AsyncSession, now: datetime, limit: int) -> int:
    """Deletes at most `limit` rows whose token expired before `now`, oldest first; how many.
    Rows another sign-out's prune holds are skipped (PostgreSQL's SKIP LOCKED; SQLite has one
    writer at a time): two prunes taking the same rows in another order could deadlock."""
    c = ConsoleSignOutRow
    doomed = (
        sa.select(col(c.jti))
        .where(col(c.expires_at) < now)
        .order_by(col(c.expires_at))
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    deleted = await session.execute(sa.delete(c).where(col(c.jti).in_(doomed.scalar_subquery())))
    return int(getattr(deleted, "rowcount", 0) or 0)
