"""Run Alembic migrations programmatically (used by the CLI, `make dev` and the tests)."""

from __future__ import annotations

import asyncio
from functools import cache
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError

from store.db import create_engine

_HERE = Path(__file__).resolve().parent


def alembic_config(database_url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(_HERE / "migrations"))
    cfg.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return cfg


def upgrade(database_url: str, revision: str = "head") -> str | None:
    """Migrate up to `revision`. A database already at a revision this code does not know is
    left as it is and that revision returned: after a rollback of the code the database is
    ahead, and Alembic's `Can't locate revision` failed the migrate step that compose's API
    and worker wait on, keeping a rolled-back service down (migrations only add)."""
    ahead = next((rev for rev in _current(database_url) if not _known(rev)), None)
    if ahead is not None:
        return ahead
    command.upgrade(alembic_config(database_url), revision)
    return None


def downgrade(database_url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(database_url), revision)


@cache
def _scripts() -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config("sqlite://"))


def code_head() -> str | None:
    """The newest migration this code has."""
    return _scripts().get_current_head()


def _known(revision: str) -> bool:
    try:
        return _scripts().get_revision(revision) is not None
    except CommandError:
        return False


def _current(database_url: str) -> tuple[str, ...]:
    """The revisions the database is at (none before its first migration). Read on the async
    engine the migrations run on (store/migrations/env.py): the URL names an async driver."""

    async def read() -> tuple[str, ...]:
        engine = create_engine(database_url)
        try:
            async with engine.connect() as conn:
                return await conn.run_sync(
                    lambda sync: tuple(MigrationContext.configure(sync).get_current_heads())
                )
        finally:
            await engine.dispose()

    return asyncio.run(read())


def schema_behind(current: str | None) -> bool:
    """Whether a database at migration `current` lacks one this code needs: it has none, or one
    of this code's other than the newest. A revision this code does not know is a later one
    (the code was rolled back past a migration, which only adds): not behind."""
    scripts = _scripts()
    if current == scripts.get_current_head():
        return False
    if current is None:
        return True
    return _known(current)
