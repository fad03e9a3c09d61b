"""The invoke benchmark's own database on a PostgreSQL server: connect to it, create it, drop it,
and count the connections ever opened to it."""

from __future__ import annotations

import uuid

import asyncpg
from sqlalchemy.engine import make_url


async def pg_connect(url: str) -> asyncpg.Connection:
    """A bare asyncpg connection to the database of a SQLAlchemy URL."""
    db = make_url(url)
    return await asyncpg.connect(
        host=db.host, port=db.port, user=db.username, password=db.password, database=db.database
    )


async def create_database(server_url: str) -> tuple[str, str]:
    """A fresh database on the server: (its URL, the server's version)."""
    name = f"mr_bench_{uuid.uuid4().hex[:10]}"
    conn = await pg_connect(server_url)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
        version = str(await conn.fetchval("SHOW server_version"))
    finally:
        await conn.close()
    url = make_url(server_url).set(database=name).render_as_string(hide_password=False)
    return url, version.split()[0]


async def drop_database(server_url: str, url: str) -> None:
    conn = await pg_connect(server_url)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{make_url(url).database}" WITH (FORCE)')
    finally:
        await conn.close()


async def pg_sessions(conn: asyncpg.Connection) -> int:
    """Connections ever opened to the benchmark's database (PostgreSQL ≥ 14)."""
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    value = await conn.fetchval(
        "SELECT sessions FROM pg_stat_database WHERE datname = current_database()"
    )
    return int(value or 0)
