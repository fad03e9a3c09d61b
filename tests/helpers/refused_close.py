"""A receipt's close refused by PostgreSQL itself: a trigger that raises on the close (the update
that sets `ended_at`) of one idempotency key's receipt, as a store that fails mid-call would.
Its claim, its release and every other key's receipt go through. A sequence, which a rolled
back statement does not undo, counts the refusals for the test to wait on.

By default the refusal is a plain `RAISE` (SQLSTATE P0001), which the gateway takes as the store
being away. `sqlstate` refuses with another (22023: the close's values at fault), after
`away_first` refusals as the store being away (53300, too many connections); `also` narrows the
refusal to closes that match an SQL condition on `NEW` (e.g. only those carrying a provider
request id)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker


class RefusedClose:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        key: str,
        *,
        sqlstate: str = "P0001",
        away_first: int = 0,
        also: str = "TRUE",
    ) -> None:
        self._sessions = sessions
        self._key = key
        self._sqlstate, self._away_first, self._also = sqlstate, away_first, also
        self._name = f"refuse_close_{uuid.uuid4().hex[:8]}"
        self._lifted = False

    async def _run(self, *statements: str) -> None:
        async with self._sessions() as session:
            for statement in statements:
                await session.execute(sa.text(statement))
            await session.commit()

    async def impose(self) -> None:
        name, key = self._name, self._key.replace("'", "''")
        await self._run(
            f"CREATE SEQUENCE {name}_count",
            f"""CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $body$
            BEGIN
              IF NEW.idempotency_key = '{key}' AND NEW.ended_at IS NOT NULL
                 AND ({self._also}) THEN
                IF nextval('{name}_count') <= {self._away_first} THEN
                  RAISE EXCEPTION 'the store is away (test fault)' USING ERRCODE = '53300';
                END IF;
                RAISE EXCEPTION 'receipt close refused (test fault)'
                  USING ERRCODE = '{self._sqlstate}';
              END IF;
              RETURN NEW;
            END $body$""",
            f"CREATE TRIGGER {name} BEFORE UPDATE ON invocation_receipts "
            f"FOR EACH ROW EXECUTE FUNCTION {name}()",
        )

    async def refused(self) -> bool:
        """Whether the close was refused at least once."""
        async with self._sessions() as session:
            called = await session.scalar(sa.text(f"SELECT is_called FROM {self._name}_count"))
        return bool(called)

    async def lift(self) -> None:
        """The store answers again: the close goes through from now on."""
        if not self._lifted:
            self._lifted = True
            await self._run(
                f"DROP TRIGGER {self._name} ON invocation_receipts",
                f"DROP FUNCTION {self._name}()",
                f"DROP SEQUENCE {self._name}_count",
            )


@asynccontextmanager
async def refused_close(
    sessions: async_sessionmaker[AsyncSession],
    key: str,
    *,
    sqlstate: str = "P0001",
    away_first: int = 0,
    also: str = "TRUE",
) -> AsyncIterator[RefusedClose]:
    fault = RefusedClose(sessions, key, sqlstate=sqlstate, away_first=away_first, also=also)
    await fault.impose()
    try:
        yield fault
    finally:
        await fault.lift()
