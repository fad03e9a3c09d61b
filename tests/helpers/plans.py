"""PostgreSQL's plans for the statements a read or write makes: each statement of the given
kinds captured as it runs, then explained with sequential scans priced out (so the plan names
the index it would use at scale rather than what suits a test database's few rows)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncSession

from store.db import create_engine, session_factory

Work = Callable[[AsyncSession], Awaitable[object]]


async def plans(url: str, work: Work, kinds: tuple[str, ...] = ("SELECT",)) -> list[str]:
    """The plans of `work`'s statements that begin with one of `kinds`, in order. The work's
    session is rolled back: a write's plan is read without it landing."""
    engine = create_engine(url)
    seen: list[tuple[str, Any]] = []

    def capture(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        seen.append((statement, parameters))

    try:
        event.listen(engine.sync_engine, "before_cursor_execute", capture)
        async with session_factory(engine)() as session:
            await work(session)
            await session.rollback()
        event.remove(engine.sync_engine, "before_cursor_execute", capture)
        found = []
        async with engine.connect() as conn:
            await conn.exec_driver_sql("SET enable_seqscan = off")
            for statement, parameters in seen:
                if statement.lstrip().upper().startswith(kinds):
                    rows = (await conn.exec_driver_sql("EXPLAIN " + statement, parameters)).all()
                    found.append("\n".join(str(r[0]) for r in rows))
        return found
    finally:
        await engine.dispose()
