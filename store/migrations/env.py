"""Alembic environment: async engines for both PostgreSQL and SQLite."""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection
from sqlmodel import SQLModel

# Every module that puts tables on SQLModel.metadata: without store.ops_tables, autogenerate
# would have written a drop of the probe, statement and reconciliation tables.
import store.ops_tables
import store.tables
import store.webhook_tables  # noqa: F401
from store.db import create_engine

target_metadata = SQLModel.metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


async def _run_async(url: str) -> None:
    engine = create_engine(url)
    async with engine.connect() as connection:
        await connection.run_sync(_run)
        await connection.commit()
    await engine.dispose()


def run_migrations_online() -> None:
    url = context.config.get_main_option("sqlalchemy.url")
    assert url, "sqlalchemy.url must be set"
    asyncio.run(_run_async(url))


if context.is_offline_mode():
    raise SystemExit("offline migrations are not supported; run against a database")
run_migrations_online()
