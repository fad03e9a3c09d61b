"""A benchmark's own migrated PostgreSQL database: on the server MODEL_ROUTER_BENCH_DATABASE_URL
names, or on a PostgreSQL of its own (bench/local_postgres.py, fsync off) in a temporary
directory; dropped, and the server stopped, when the benchmark is done."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bench.invoke_database import create_database, drop_database
from bench.local_postgres import LocalPostgres
from store.migrate import upgrade


@dataclass(frozen=True)
class OwnDatabase:
    url: str  # SQLAlchemy asyncpg URL, migrated to head
    version: str  # the server's
    postmaster: int | None  # the server's pid when this benchmark started it


@contextmanager
def own_database(prefix: str) -> Iterator[OwnDatabase]:
    server = os.environ.get("MODEL_ROUTER_BENCH_DATABASE_URL")
    work = Path(tempfile.mkdtemp(prefix=prefix))
    work.chmod(0o755)  # PostgreSQL runs as another user and needs to reach its directory
    pg = None if server else LocalPostgres(work)
    try:
        server_url = server or pg.start()  # type: ignore[union-attr]
        url, version = asyncio.run(create_database(server_url))
        try:
            upgrade(url)
            yield OwnDatabase(url, version, pg.postmaster if pg is not None else None)
        finally:
            asyncio.run(drop_database(server_url, url))
    finally:
        if pg is not None:
            pg.stop("immediate")
        shutil.rmtree(work, ignore_errors=True)
