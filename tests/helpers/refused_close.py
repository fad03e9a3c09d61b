"""A receipt's close refused by PostgreSQL itself: a trigger that raises on the close (the update
that sets `ended_at`) of one idempotency key's receipt, as a store that fails mid-call would.
Its claim, its release and every other key's receipt go through. A sequence, which a rolled
back statement does not undo, counts the refusals for the test to wait on."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker


class RefusedClose:
    def __init__(self, sessions: async_sessionmaker[AsyncSession], key: str) -> None:
        self._sessions = sessions
        self._key = key
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
              IF NEW.idempotency_key = '{key}' AND NEW.ended_at IS NOT NULL THEN
                PERFORM nextval('{name}_count');
                RAISE EXCEPTION 'receipt close refused (test fault)';
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
    sessions: async_sessionmaker[AsyncSession], key: str
) -> AsyncIterator[RefusedClose]:
    fault = RefusedClose(sessions, key)
    await fault.impose()
    try:
        yield fault
    finally:
        await fault.lift()
