"""Run Alembic migrations programmatically (used by the CLI, `make dev` and the tests)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from alembic.util import CommandError

_HERE = Path(__file__).resolve().parent


def alembic_config(database_url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(_HERE / "migrations"))
    cfg.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return cfg


def upgrade(database_url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(database_url), revision)


@cache
def _scripts() -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config("sqlite://"))


def schema_behind(current: str | None) -> bool:
    """Whether a database at migration `current` lacks one this code needs: it has none, or one
    of this code's other than the newest. A revision this code does not know is a later one
    (the code was rolled back past a migration, which only adds): not behind."""
    scripts = _scripts()
    if current == scripts.get_current_head():
        return False
    if current is None:
        return True
    try:
        return scripts.get_revision(current) is not None
    except CommandError:
        return False
