"""A full dump of a test database with PostgreSQL's own pg_dump: schema, every row of every
table (the outbox, receipts, evidence, alembic's own), as plain SQL text."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess

from sqlalchemy.engine import make_url


def pg_dump_binary() -> str:
    # scripts/test.sh names the installation it started; otherwise the newest one found.
    candidates = [os.path.join(os.environ.get("MODEL_ROUTER_TEST_PG_BIN", ""), "pg_dump")]
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_dump"), reverse=True)
    candidates.append(shutil.which("pg_dump") or "")
    for path in candidates:
        if path and os.access(path, os.X_OK):
            return path
    raise RuntimeError("pg_dump not found; set MODEL_ROUTER_TEST_PG_BIN")


def pg_dump(database_url: str) -> str:
    url = make_url(database_url)
    result = subprocess.run(
        [
            pg_dump_binary(),
            "--host",
            str(url.host),
            "--port",
            str(url.port),
            "--username",
            str(url.username),
            "--no-password",
            str(url.database),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return result.stdout
