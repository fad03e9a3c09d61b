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
it. One second of margin covers the order of a row's two defaults and a small clock step. The
bound is never later than the reader's own transaction start (`now()`): PostgreSQL keeps the
activity view it read for the rest of a transaction, and a writer begun after that read is not
in it. Only client sessions of this database write the outbox (not autovacuum, not another
database). An open writer whose start this role cannot see (another role's session, without
`pg_read_all_stats`: its type is hidden as well, so a hidden type counts as a client's) or a
prepared transaction stops the horizon at 0 until it ends: readers then get nothing new
(better late than lost), and the read costs no scan.

So an event is readable about a second after it is written, and any session left in an open
transaction that wrote (an operator's psql, a stuck process) holds every reader back until it
ends. SQLite has one writer at a time: positions commit in order, and there is no horizon.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

MARGIN_SECONDS = 1.0

# The horizon first, the rows after it by a later statement, whose own snapshot sees every
# transaction that was no longer open here. `now()` caps the bound wherever in its transaction
# the reader asks (the activity view may be one read earlier in it).
#
# The horizon is the largest position among the rows written before the bound, read by the
# time rows were written (ix_outbox_inserted_at, migration 0019): the newest row written before
# the bound, then the largest position among those written up to the margin before it (a row's
# position and its time are taken one after the other: rows written together may order
# differently by each, by less than the margin, as above). Materialized, or PostgreSQL takes
# that max() by walking the primary key back again. Walked back from the newest position, as it
# was, every row written since the bound was read and passed over: with a writer left open for
# an hour at 150 events a second, some 540,000 a poll. Rows from before 0009 have no time, and
# every one precedes those that have: the largest of their positions stands while no row with a
# time is old enough (a database just upgraded, or just made).
_HORIZON = sa.text(
    """
    WITH open_writers AS (
        SELECT min(xact_start) AS oldest,
               bool_or(xact_start IS NULL)
               OR EXISTS (SELECT 1 FROM pg_prepared_xacts WHERE database = current_database())
               AS unseen
        FROM pg_stat_activity
        WHERE datname = current_database()
          AND (backend_type = 'client backend' OR backend_type IS NULL)
          AND backend_xid IS NOT NULL AND pid <> pg_backend_pid()
    ), bound AS (
        SELECT unseen,
               least(coalesce(oldest, now()), now()) - make_interval(secs => :margin) AS at
        FROM open_writers
    )
    SELECT CASE WHEN unseen THEN -1 ELSE coalesce((
        WITH written AS MATERIALIZED (
            SELECT position FROM outbox_events
            WHERE inserted_at < bound.at
              AND inserted_at >= (
                  SELECT max(inserted_at) FROM outbox_events WHERE inserted_at < bound.at
              ) - make_interval(secs => :margin)
        )
        SELECT max(position) FROM written
    ), (
        SELECT position FROM outbox_events
        WHERE inserted_at IS NULL
        ORDER BY position DESC
        LIMIT 1
    ), 0) END
    FROM bound
    """
).bindparams(margin=MARGIN_SECONDS)


class HorizonHidden(Exception):
    """An open writer whose start this role cannot see, or a prepared transaction: which
    positions are settled cannot be told until it ends."""


async def settled_position(session: AsyncSession) -> int | None:
    """The last outbox position with none still to appear at or below it (0 while a writer is
    hidden: readers then get nothing new); None where there is no such bound to keep
    (SQLite)."""
    try:
        return await settled_or_hidden(session)
    except HorizonHidden:
        return 0


async def settled_or_hidden(session: AsyncSession) -> int | None:
    """As settled_position, but a hidden writer raises HorizonHidden instead of reading 0: a
    new subscription that took 0 for its start replayed the tenant's whole history, days of
    deliveries, where it asked for events from now on."""
    if session.get_bind().dialect.name != "postgresql":
        return None
    found = int((await session.scalar(_HORIZON)) or 0)
    if found < 0:
        raise HorizonHidden
    return found
