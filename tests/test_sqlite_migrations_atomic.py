"""On SQLite (`make dev`'s store) a migration that fails part-way leaves nothing of itself
behind, as on PostgreSQL: the next run applies it whole. Python's sqlite3 committed each
CREATE, ALTER and DROP on its own, so a "database is locked" between two of a migration's
statements left the first applied and the migration unrecorded, and every later run failed."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError

from store.db import create_engine
from store.migrate import code_head, upgrade
from tests.test_migrations import _drift


@contextmanager
def locked_at(statement_start: str) -> Iterator[None]:
    """Every engine's statement that begins with `statement_start` fails as a busy database
    would fail it, once, before it runs: where a writer of the service held the lock past the
    busy timeout. The migrations make their engine themselves (store/migrations/env.py), so
    the hook is on every engine of the process."""
    failed: list[str] = []

    def busy(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if not failed and statement.lstrip().startswith(statement_start):
            failed.append(statement)
            raise sqlite3.OperationalError("database is locked")

    event.listen(Engine, "before_cursor_execute", busy)
    try:
        yield
    finally:
        event.remove(Engine, "before_cursor_execute", busy)
    assert failed, f"no statement began {statement_start!r}"


async def _version_and_tables(url: str) -> tuple[str, set[str], set[str]]:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            version = await conn.scalar(sa.text("SELECT version_num FROM alembic_version"))
            tables = set(
                await conn.scalars(sa.text("SELECT name FROM sqlite_master WHERE type='table'"))
            )
            columns = set(
                await conn.scalars(
                    sa.text("SELECT name FROM pragma_table_info('usage_statement_lines')")
                )
            )
            return str(version), tables, columns
    finally:
        await engine.dispose()


async def test_a_migration_failing_after_its_first_alter_is_undone_and_applied_again(
    tmp_path: Path,
) -> None:
    # 0017 adds a column to three tables, one ALTER each: the second fails.
    url = f"sqlite+aiosqlite:///{tmp_path}/dev.db"
    await asyncio.to_thread(upgrade, url, "0016")
    with (
        locked_at("ALTER TABLE receipt_reconciliations ADD COLUMN"),
        pytest.raises(OperationalError, match="database is locked"),
    ):
        await asyncio.to_thread(upgrade, url)
    version, _, columns = await _version_and_tables(url)
    assert version == "0016" and "cache_write_input_tokens" not in columns  # the first ALTER's

    # It failed "duplicate column name: cache_write_input_tokens" here, and every run after.
    assert await asyncio.to_thread(upgrade, url) is None
    version, _, columns = await _version_and_tables(url)
    assert version == code_head() and "cache_write_input_tokens" in columns
    assert await _drift(url) == []


async def test_a_table_rebuild_failing_part_way_is_undone_and_applied_again(
    tmp_path: Path,
) -> None:
    # 0018 rebuilds the outbox (a new table, the rows copied, the old one dropped, the new one
    # renamed): the drop fails once the rows are copied.
    url = f"sqlite+aiosqlite:///{tmp_path}/dev.db"
    await asyncio.to_thread(upgrade, url, "0017")
    with (
        locked_at("DROP TABLE outbox_events"),
        pytest.raises(OperationalError, match="database is locked"),
    ):
        await asyncio.to_thread(upgrade, url)
    version, tables, _ = await _version_and_tables(url)
    assert version == "0017" and "_alembic_tmp_outbox_events" not in tables

    # It failed "table _alembic_tmp_outbox_events already exists" here, and every run after.
    assert await asyncio.to_thread(upgrade, url) is None
    version, tables, _ = await _version_and_tables(url)
    assert version == code_head() and "_alembic_tmp_outbox_events" not in tables
    assert await _drift(url) == []
