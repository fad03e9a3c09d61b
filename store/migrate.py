"""Run Alembic migrations programmatically (used by the CLI, `make dev` and the tests), one
runner at a time on PostgreSQL and without queueing the service's statements behind them."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path

from alembic import command, op
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy.exc import DBAPIError

from store.db import create_engine

_HERE = Path(__file__).resolve().parent

log = logging.getLogger(__name__)

# The session-level advisory lock every migration run on PostgreSQL takes first (the bytes of
# "mr-migr8"): a second runner (an operator's `db upgrade` during the migrate Job, a Job pod
# replaced while the first still runs) waits for the first, then finds nothing left to do.
# Without it both read the same version and ran the same DDL, and one failed half-way.
MIGRATION_LOCK_KEY = 0x6D722D6D69677238

# How long one migration statement may wait for a table lock. An ALTER TABLE queued behind a
# long read holds every later statement on that table behind it, the invoke path's claims and
# closes on invocation_receipts included, for as long as the read runs: past this it gives up
# instead, and the run is tried again after a pause that lets the queued statements through.
LOCK_TIMEOUT_SECONDS = 5.0
LOCK_ATTEMPTS = 5

_LOCK_NOT_AVAILABLE = "55P03"  # SQLSTATE lock_not_available: lock_timeout expired
_OLDEST_TRANSACTIONS = (
    "SELECT pid, now() - xact_start AS age, state, query FROM pg_stat_activity"
    " WHERE xact_start IS NOT NULL ORDER BY xact_start"
)


class MigrationLockTimeout(RuntimeError):
    """Every attempt of a migration run gave up waiting for a table lock."""


def alembic_config(database_url: str, lock_timeout: float = LOCK_TIMEOUT_SECONDS) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(_HERE / "migrations"))
    cfg.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    cfg.attributes["lock_timeout_ms"] = max(1, round(lock_timeout * 1000))
    return cfg


def upgrade(
    database_url: str,
    revision: str = "head",
    *,
    lock_timeout: float = LOCK_TIMEOUT_SECONDS,
    attempts: int = LOCK_ATTEMPTS,
) -> str | None:
    """Migrate up to `revision`. A database already at a revision this code does not know is
    left as it is and that revision returned: after a rollback of the code the database is
    ahead, and Alembic's `Can't locate revision` failed the migrate step that compose's API
    and worker wait on, keeping a rolled-back service down (migrations only add).

    A run whose statement waited `lock_timeout` for a table lock is tried again, `attempts`
    times in all (each migration is its own transaction: those done stay done); then
    MigrationLockTimeout says what held it up."""
    ahead = next((rev for rev in _current(database_url) if not _known(rev)), None)
    if ahead is not None:
        return ahead
    cfg = alembic_config(database_url, lock_timeout)
    again = "model-router db upgrade" + ("" if revision == "head" else f" --revision {revision}")
    _retrying(lambda: command.upgrade(cfg, revision), revision, again, lock_timeout, attempts)
    return None


def downgrade(
    database_url: str, revision: str = "base", *, lock_timeout: float = LOCK_TIMEOUT_SECONDS
) -> None:
    cfg = alembic_config(database_url, lock_timeout)
    again = f"model-router db downgrade {revision} --yes"
    _retrying(
        lambda: command.downgrade(cfg, revision), revision, again, lock_timeout, LOCK_ATTEMPTS
    )


def _retrying(
    run: Callable[[], None], target: str, again: str, lock_timeout: float, attempts: int
) -> None:
    """`run`, tried again while its statements meet the lock timeout; `again` is the command
    the operator runs once the lock is free (the upgrade or the downgrade that gave up)."""
    for attempt in range(1, attempts + 1):
        try:
            run()
            return
        except DBAPIError as exc:
            if not _lock_timed_out(exc):
                raise
            statement = " ".join(str(exc.statement or "").split())[:200]
            if attempt == attempts:
                raise MigrationLockTimeout(
                    f"migrating to {target} gave up {attempts} times after waiting "
                    f"{lock_timeout:g}s for a table lock another transaction holds (while "
                    f"running: {statement}). Each migration done before it stays done. Find "
                    f"the transaction with `{_OLDEST_TRANSACTIONS}`, let it finish or end it "
                    f"(`SELECT pg_terminate_backend(pid)`: pg_cancel_backend does not end an "
                    f"idle transaction), then run `{again}` again."
                ) from exc
            # The pause grows with each attempt so that the statements the migration held up
            # while it waited run before it queues again.
            pause = lock_timeout * attempt
            log.warning(
                "migration waited %gs for a table lock another transaction holds and gave up "
                "so as not to hold up the statements queued behind it (while running: %s); "
                "trying again in %gs (attempt %d of %d)",
                lock_timeout,
                statement,
                pause,
                attempt + 1,
                attempts,
            )
            time.sleep(pause)


def _lock_timed_out(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if getattr(seen, "sqlstate", None) == _LOCK_NOT_AVAILABLE:
            return True
        seen = getattr(seen, "orig", None) or seen.__cause__
    return False


@contextmanager
def concurrent_index_block() -> Iterator[None]:
    """The autocommit block a migration builds or drops an index CONCURRENTLY in, with no lock
    timeout on PostgreSQL: such a build waits for every transaction older than it to end, and
    while it waits it holds up no read or write (its lock conflicts only with DDL and
    VACUUM), so the migration lock timeout would only fail it during any transaction longer
    than a few seconds (a backup's, a report's). The timeout is put back after the block; a
    block that failed ends the run, and the connection with it, so it is not put back then."""
    with op.get_context().autocommit_block():
        bind = op.get_bind()
        if bind.dialect.name != "postgresql":
            yield
            return
        bound = bind.exec_driver_sql("SHOW lock_timeout").scalar()
        bind.exec_driver_sql("SET lock_timeout = 0")
        yield
        bind.exec_driver_sql(f"SET lock_timeout = '{bound}'")


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
