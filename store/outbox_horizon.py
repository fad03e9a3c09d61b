"""How far the outbox can be read in position order with no event still to appear below it.

A row takes its position (a sequence) when it is inserted, not when its transaction commits.
A reader that returned a later position while an earlier one's transaction was still open, and
moved its cursor past it, never saw that event: a lifecycle transition holds its event's
position while it waits on the catalog's row lock, and receipt closes commit later positions
meanwhile. A webhook subscription lost it for good, and so did an `/factory/events` reader
paging with `nextAfter`.

The horizon is the last position whose every predecessor is settled (committed or rolled back).
Any transaction still open began at or after the oldest open writing transaction's start, and
took its positions after it began; so a position taken before that start, by the database's
clock (`inserted_at`, `clock_timestamp()` as the row took it), has no open transaction below
it. One second of margin covers the order of a row's two defaults and a small clock step. An
open transaction whose start this role cannot see (another role's session) holds the horizon
where it is, older than any row: better late than lost.

So an event is readable about a second after it is written, and an idle-in-transaction session
that wrote (an operator's psql, a stuck process) holds every reader back until it ends.
SQLite has one writer at a time: positions commit in order, and there is no horizon.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

MARGIN_SECONDS = 1.0

# pg_stat_activity is read first in the reader's transaction (its statistics snapshot is then
# kept for the transaction), and the rows after, by a later statement whose own snapshot sees
# every transaction that was no longer open here.
_HORIZON = sa.text(
    """
    WITH open_writers AS (
        SELECT min(xact_start) AS oldest, bool_or(xact_start IS NULL) AS unseen
        FROM pg_stat_activity
        WHERE datname = current_database() AND backend_xid IS NOT NULL
          AND pid <> pg_backend_pid()
    ), bound AS (
        SELECT CASE WHEN unseen THEN '-infinity'::timestamptz
                    ELSE coalesce(oldest, clock_timestamp()) - make_interval(secs => :margin)
               END AS settled_before
        FROM open_writers
    )
    SELECT coalesce((
        SELECT position FROM outbox_events, bound
        WHERE inserted_at IS NULL OR inserted_at < bound.settled_before
        ORDER BY position DESC
        LIMIT 1
    ), 0)
    """
).bindparams(margin=MARGIN_SECONDS)


async def settled_position(session: AsyncSession) -> int | None:
    """The last outbox position with none still to appear at or below it; None where there is
    no such bound to keep (SQLite)."""
    if session.get_bind().dialect.name != "postgresql":
        return None
    return int((await session.scalar(_HORIZON)) or 0)
