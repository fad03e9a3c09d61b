"""The commands that open the database themselves say what failed, without a traceback and
without the password: `db upgrade` against a refused port ended in a ConnectionRefusedError
traceback, an unknown `--revision` in Alembic's CommandError, and `clients create` called a
database it had reached but never migrated "out of reach"."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from core.local_ports import free_port
from tests.conftest import create_database, drop_database, pg_server_url
from tests.helpers.cli import run

CLIENT = ("clients", "create", "--tenant", "acme", "--client-id", "ops")
GRANTS = ("--role", "Operator", "--scope", "factory.models.read")


def _said(text: str) -> str:
    return " ".join(text.split())


async def test_a_database_out_of_reach_is_named_without_its_password() -> None:
    port = free_port()  # nothing listens there
    env = {"MODEL_ROUTER_DATABASE_URL": f"postgresql+asyncpg://ops:s3cr3t@127.0.0.1:{port}/mr"}
    for args in (("db", "upgrade"), ("db", "downgrade", "base", "--yes"), (*CLIENT, *GRANTS)):
        result = await run(env, *args)
        assert result.exit_code == 2, result.output
        said = _said(result.stderr)
        assert f"cannot reach the database at postgresql+asyncpg://ops:***@127.0.0.1:{port}/mr" in (
            said
        ), said
        assert "ConnectionRefusedError" in said
        assert "s3cr3t" not in result.output and "Traceback" not in result.output

    # Reached, but refused at the connection (no such database): out of reach too, in the
    # server's words.
    missing = make_url(pg_server_url()).set(database="mr_no_such_database")
    env = {"MODEL_ROUTER_DATABASE_URL": missing.render_as_string(hide_password=False)}
    result = await run(env, "db", "upgrade")
    assert result.exit_code == 2, result.output
    assert "cannot reach the database at" in result.stderr
    assert "mr_no_such_database" in result.stderr and "Traceback" not in result.output


@pytest.mark.parametrize(
    "url",
    [
        "postgresql+asyncpg://ops@127.0.0.1:{port}/mr?password=s3cr3t",  # the driver takes it
        "postgresql+asyncpg://ops:s3c@r3t@127.0.0.1:{port}/mr",  # pasted in unencoded
        "postgresql+asyncpg://ops:s3c%40r3t@127.0.0.1:{port}/mr",
    ],
)
async def test_a_password_anywhere_in_the_url_is_never_said(url: str) -> None:
    env = {"MODEL_ROUTER_DATABASE_URL": url.format(port=free_port())}
    result = await run(env, "db", "upgrade")
    assert result.exit_code == 2, result.output
    assert "cannot reach the database at" in result.stderr
    for secret in ("s3cr3t", "s3c@r3t", "s3c%40r3t", "r3t"):
        assert secret not in result.output, result.output


async def test_an_unknown_revision_is_named(tmp_path: Path) -> None:
    env = {"MODEL_ROUTER_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'r.db'}"}
    result = await run(env, "db", "upgrade", "--revision", "nosuch")
    assert result.exit_code == 2, result.output
    assert "db upgrade --revision nosuch" in result.stderr
    assert "Can't locate revision identified by 'nosuch'" in _said(result.stderr)
    assert "Traceback" not in result.output
    assert (await run(env, "db", "upgrade")).exit_code == 0
    result = await run(env, "db", "downgrade", "nosuch", "--yes")
    assert result.exit_code == 2, result.output
    assert "nosuch" in result.stderr and "Traceback" not in result.output


async def test_clients_create_on_a_database_never_migrated_says_to_migrate(
    tmp_path: Path,
) -> None:
    url = await create_database("mr_bare")
    try:
        for database_url in (url, f"sqlite+aiosqlite:///{tmp_path / 'bare.db'}"):
            env = {"MODEL_ROUTER_DATABASE_URL": database_url}
            result = await run(env, *CLIENT, *GRANTS)
            assert result.exit_code == 2, result.output
            said = _said(result.stderr)
            assert "run `model-router db upgrade`" in said, said
            assert "cannot reach" not in said and "Traceback" not in result.output
    finally:
        await drop_database(url)


async def test_an_sqlite_too_old_is_said_without_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host's SQLite library below 3.35 (store/db.py MIN_SQLITE): `db upgrade` ended in a
    traceback whose last line was the message."""
    import sqlite3

    monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 31, 1))
    env = {"MODEL_ROUTER_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'old.db'}"}
    result = await run(env, "db", "upgrade")
    assert result.exit_code == 2, result.output
    said = _said(result.stderr)
    assert "SQLite 3.31.1 is too old" in said and "3.35.0 or later" in said, said
    assert "Traceback" not in result.output
