"""INSERT … ON CONFLICT on both engines, for writes that must be idempotent under retries
and concurrent workers without a read-then-write race."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import inspect
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession


async def upsert(
    session: AsyncSession,
    model: Any,
    rows: Sequence[dict[str, Any]],
    *,
    conflict: Sequence[str],
    update: Sequence[str] = (),
) -> None:
    """Insert `rows` into `model`'s table; on a conflict on `conflict`, overwrite the columns
    in `update` (none: keep the existing row)."""
    if not rows:
        return
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    stmt = insert(inspect(model).local_table).values(list(rows))
    if update:
        stmt = stmt.on_conflict_do_update(
            index_elements=list(conflict),
            set_={name: stmt.excluded[name] for name in update},
        )
    else:
        stmt = stmt.on_conflict_do_nothing(index_elements=list(conflict))
    await session.execute(stmt)
