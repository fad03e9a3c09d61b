"""Migrations on a live PostgreSQL: one runner at a time, and a migration that meets a table lock
gives up after the lock timeout (so as not to queue every claim and close behind it), is tried
again, and says what held it up when it never gets the lock."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from bench.local_postgres import LocalPostgres
from store.db import create_engine
from store.migrate import (
    MIGRATION_LOCK_KEY,
    MigrationLockTimeout,
    _current,
    code_head,
    downgrade,
    upgrade,
)
from tests.helpers.deadline import UNBOUNDED, eventually

OwnDatabase = Callable[..., AbstractAsyncContextManager[str]]

# Short, so that the tests see several attempts in a second or two; production's is 5 s.
LOCK_TIMEOUT = 0.3
# What a run logs once it found the migration lock taken (store/migrations/env.py).
WAITED = "another migration run holds the migration lock: waiting for it to end"


@pytest.fixture(scope="module")
async def server() -> AsyncIterator[str]:
    """A PostgreSQL server of this module's own. A statement waiting for a lock holds a
    snapshot, and a snapshot anywhere on a server holds back the pruning of dead row versions
    in every database on it: the waits these tests make on purpose, on the suite's server,
    made tests/test_hot_path_indexes.py running beside them read 57 index entries a receipt
    statement instead of under 6."""
    work = Path(tempfile.mkdtemp(prefix="mr-pg-migrate."))
    work.chmod(0o755)  # PostgreSQL runs as another user and needs to reach its directory
    pg = LocalPostgres(work)
    try:
        yield pg.start()
    finally:
        pg.stop("immediate")
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture
def own_database(server: str) -> OwnDatabase:
    @asynccontextmanager
    async def made(at: str | None = None) -> AsyncIterator[str]:
        url = make_url(server).set(database=f"mr_{uuid.uuid4().hex[:10]}")
        admin = create_engine(server)
        try:
            async with admin.connect() as conn:
                autocommit = await conn.execution_options(isolation_level="AUTOCOMMIT")
                await autocommit.execute(text(f'CREATE DATABASE "{url.database}"'))
        finally:
            await admin.dispose()
        rendered = url.render_as_string(hide_password=False)
        if at is not None:
            await asyncio.to_thread(upgrade, rendered, at)
        yield rendered  # dropped with the server

    return made


@asynccontextmanager
async def holding(url: str, statement: str) -> AsyncIterator[None]:
    """Another transaction holding a lock (`statement`) until the block ends."""
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            await conn.execute(text(statement))
            yield
            await conn.rollback()
    finally:
        await engine.dispose()


async def _claims_lock(url: str) -> None:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            await conn.execute(text("LOCK TABLE invocation_receipts IN ROW EXCLUSIVE MODE"))
            await conn.rollback()
    finally:
        await engine.dispose()


async def _versions(url: str) -> list[str]:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(text("SELECT version_num FROM alembic_version"))
            return [r[0] for r in rows]
    finally:
        await engine.dispose()


def _retries(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "trying again" in r.getMessage()]


async def test_concurrent_upgrades_of_a_fresh_database_all_succeed_and_apply_once(
    own_database: OwnDatabase, tmp_path: Path
) -> None:
    # An operator's `db upgrade` during the migrate Job, or a replaced Job pod: without the
    # migration lock each read "no version" and ran 0001, and all but one failed half-way.
    # Processes, as in production: Alembic's `context` is one per process. The test holds the
    # migration lock itself until each run has tried it and logged that it waits (the only
    # sign of it: between tries a run's session is idle, and pg_stat_activity shows its
    # COMMIT), then lets go: the three runs contend for it however slowly each one started.
    async with own_database() as url:
        logs = [tmp_path / f"upgrade-{n}.log" for n in range(3)]
        engine = create_engine(url)
        runs: list[asyncio.subprocess.Process] = []
        try:
            async with engine.connect() as holder:
                await holder.execute(text(f"SELECT pg_advisory_lock({MIGRATION_LOCK_KEY})"))
                await holder.commit()  # the lock is the session's: it outlives the transaction
                runs = [await _db_upgrade(url, log) for log in logs]
                await eventually(
                    lambda: all(WAITED in _read(log) for log in logs), timeout=UNBOUNDED
                )
                await holder.execute(text(f"SELECT pg_advisory_unlock({MIGRATION_LOCK_KEY})"))
                await holder.commit()
            codes = [await asyncio.wait_for(run.wait(), 5 * UNBOUNDED) for run in runs]
        finally:
            for run in runs:
                if run.returncode is None:
                    run.kill()
                    await run.wait()
            await engine.dispose()
        for code, log in zip(codes, logs, strict=True):
            output = _read(log)
            assert code == 0, output
            assert WAITED in output and "database at head" in output
        assert await _versions(url) == [code_head()]


def _read(log: Path) -> str:
    return log.read_text() if log.exists() else ""


async def _db_upgrade(url: str, log: Path) -> asyncio.subprocess.Process:
    """`model-router db upgrade` started, its stdout and stderr written to `log` as they come."""
    with log.open("wb") as out:  # the child holds its own copy of the file
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "cli.main",
            "db",
            "upgrade",
            cwd=Path(__file__).parents[1],
            env={**os.environ, "MODEL_ROUTER_DATABASE_URL": url},
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
        )


async def test_a_migration_meeting_a_held_lock_gives_up_and_succeeds_once_it_is_released(
    caplog: pytest.LogCaptureFixture, own_database: OwnDatabase
) -> None:
    """0007 alters invocation_receipts (ACCESS EXCLUSIVE) while a long read holds ACCESS SHARE
    on it. Unbounded, the ALTER queued behind the read, and every claim and close queued
    behind the ALTER; bounded, it gives up, says so, and is tried again after a pause."""
    caplog.set_level(logging.WARNING, logger="store.migrate")
    async with own_database(at="0006") as url:
        run: asyncio.Future[str | None] | None = None
        try:
            async with holding(url, "LOCK TABLE invocation_receipts IN ACCESS SHARE MODE"):
                run = asyncio.ensure_future(
                    asyncio.to_thread(upgrade, url, lock_timeout=LOCK_TIMEOUT, attempts=5)
                )
                await eventually(lambda: _retries(caplog), timeout=UNBOUNDED)
                # A claim's lock on the receipts is granted while the read still runs: the
                # ALTER waits at most the lock timeout in front of it, not as long as the read.
                await asyncio.wait_for(_claims_lock(url), UNBOUNDED)
            assert await asyncio.wait_for(asyncio.shield(run), UNBOUNDED) is None
        finally:
            if run is not None:
                await asyncio.gather(run, return_exceptions=True)
        assert await _versions(url) == [code_head()]
        first = _retries(caplog)[0]
        assert "ALTER TABLE invocation_receipts" in first and "attempt 2 of 5" in first


async def test_a_lock_never_released_fails_the_run_naming_what_to_look_for(
    own_database: OwnDatabase,
) -> None:
    # 0012 (pricebook_entries) is applied and stays applied; 0013 (webhook_subscriptions)
    # never gets its lock. Each migration is its own transaction: a retry resumes at 0013.
    async with own_database(at="0011") as url:
        run: asyncio.Future[str | None] | None = None
        try:
            async with holding(url, "LOCK TABLE webhook_subscriptions IN ACCESS SHARE MODE"):
                run = asyncio.ensure_future(
                    asyncio.to_thread(upgrade, url, lock_timeout=LOCK_TIMEOUT, attempts=2)
                )
                with pytest.raises(MigrationLockTimeout) as failed:
                    await asyncio.wait_for(asyncio.shield(run), UNBOUNDED)
        finally:
            if run is not None:
                await asyncio.gather(run, return_exceptions=True)
        message = str(failed.value)
        assert "gave up 2 times" in message and "webhook_subscriptions" in message
        assert "pg_stat_activity" in message and "model-router db upgrade" in message
        assert await asyncio.to_thread(_current, url) == ("0012",)
        # Once the lock is gone the same command finishes the job.
        assert await asyncio.to_thread(upgrade, url) is None
        assert await _versions(url) == [code_head()]


async def test_a_downgrade_that_gives_up_names_the_downgrade_to_run_again(
    own_database: OwnDatabase,
) -> None:
    # The message is what `db downgrade` prints (exit 3): it named `db upgrade`, which would
    # have undone nothing the operator asked for.
    async with own_database(at="0013") as url:
        run: asyncio.Future[None] | None = None
        try:
            async with holding(url, "LOCK TABLE webhook_subscriptions IN ACCESS SHARE MODE"):
                run = asyncio.ensure_future(
                    asyncio.to_thread(downgrade, url, "0012", lock_timeout=LOCK_TIMEOUT)
                )
                with pytest.raises(MigrationLockTimeout) as failed:
                    await asyncio.wait_for(asyncio.shield(run), UNBOUNDED)
        finally:
            if run is not None:
                await asyncio.gather(run, return_exceptions=True)
        message = str(failed.value)
        assert "run `model-router db downgrade 0012 --yes` again" in message
        assert "db upgrade" not in message
        assert await asyncio.to_thread(_current, url) == ("0013",)


async def test_a_concurrent_index_build_waits_for_a_writer_past_the_lock_timeout(
    caplog: pytest.LogCaptureFixture, own_database: OwnDatabase
) -> None:
    """A CREATE INDEX CONCURRENTLY waits for the transactions writing its table to end, and
    blocks nobody while it does: the migration lock timeout would only fail it (during a
    backup's or a report's transaction), so it is lifted for those builds (0015 here)."""
    caplog.set_level(logging.WARNING, logger="store.migrate")
    async with own_database(at="0014") as url:
        run: asyncio.Future[str | None] | None = None
        try:
            async with holding(url, "LOCK TABLE probe_samples IN ROW EXCLUSIVE MODE"):
                run = asyncio.ensure_future(
                    asyncio.to_thread(upgrade, url, lock_timeout=LOCK_TIMEOUT, attempts=2)
                )
                await eventually(lambda: _build_waited(url, 5 * LOCK_TIMEOUT), timeout=UNBOUNDED)
            assert await asyncio.wait_for(asyncio.shield(run), UNBOUNDED) is None
        finally:
            if run is not None:
                await asyncio.gather(run, return_exceptions=True)
        assert _retries(caplog) == []
        assert await _versions(url) == [code_head()]


async def _build_waited(url: str, seconds: float) -> bool:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            waited = await conn.scalar(
                text(
                    "SELECT max(extract(epoch FROM now() - query_start)) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND wait_event_type = 'Lock'"
                    " AND query ILIKE 'CREATE INDEX CONCURRENTLY%'"
                )
            )
        return waited is not None and float(waited) >= seconds
    finally:
        await engine.dispose()
