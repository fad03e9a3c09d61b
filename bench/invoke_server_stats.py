"""What the servers did per invocation: PostgreSQL's statement log over a few gateway calls, and
the Temporal frontend's request counters."""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from bench.invoke_database import pg_connect
from bench.invoke_load import Path_
from bench.invoke_stack import Stack

_PG_LINE = re.compile(r"duration: ([0-9.]+) ms\s+(statement|execute [^:]*|parse [^:]*|bind [^:]*):")


async def pg_statements(stack: Stack, gateway: Path_, calls: int) -> dict[str, Any] | None:
    """Log every statement (log_min_duration_statement=0) while `calls` gateway calls run one at
    a time; these calls are not timed. Only on the PostgreSQL this benchmark started."""
    pg = stack.postgres
    if pg is None or pg.log is None or not pg.server_url:
        return None
    log = pg.log
    conn = await pg_connect(pg.server_url)
    try:
        await conn.execute("ALTER SYSTEM SET log_min_duration_statement = 0")
        await conn.execute("SELECT pg_reload_conf()")
        await asyncio.sleep(0.3)
        offset = log.stat().st_size
        for i in range(calls):
            await gateway.call("pglog", i, False)
        await asyncio.sleep(0.3)
        await conn.execute("ALTER SYSTEM RESET log_min_duration_statement")
        await conn.execute("SELECT pg_reload_conf()")
    finally:
        await conn.close()
    return parse_pg_log(read_from(log, offset), calls)


def parse_pg_log(text: str, calls: int) -> dict[str, Any]:
    """Round trips by kind: simple-protocol statements (BEGIN, COMMIT, ROLLBACK), executes of
    prepared statements, and SQLAlchemy's pre-ping (asyncpg binds an empty statement `;`)."""
    kinds: Counter[str] = Counter()
    server_ms = 0.0
    lines = text.splitlines()
    for n, line in enumerate(lines):
        if "log_min_duration_statement" in line or "pg_reload_conf" in line:
            continue
        m = _PG_LINE.search(line)
        if not m:
            continue
        server_ms += float(m.group(1))
        what = m.group(2)
        sql = line[m.end() :].strip()
        if not sql and n + 1 < len(lines):
            sql = lines[n + 1].strip()
        if what.startswith("bind"):
            if sql.strip("; ") == "":
                kinds["pre-ping"] += 1
            continue
        if what.startswith("parse"):
            continue
        word = (sql.split() or ["?"])[0].upper().rstrip(";")
        if word == "SELECT" and "FOR UPDATE" in sql.upper():
            word = "SELECT … FOR UPDATE"
        kinds[word or "?"] += 1
    total = sum(kinds.values())
    return {
        "calls": calls,
        "per_call": total / calls,
        "kinds": {k: v / calls for k, v in kinds.most_common()},
        "server_ms_per_call": server_ms / calls,
    }


def read_from(path: Path, offset: int) -> str:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def temporal_requests(port: int) -> Counter[str]:
    counts: Counter[str] = Counter()
    try:
        with httpx.Client(timeout=5) as http:
            text = http.get(f"http://127.0.0.1:{port}/metrics").text
    except httpx.HTTPError:
        return counts
    for line in text.splitlines():
        if line.startswith("service_requests{") and 'service_name="frontend"' in line:
            m = re.search(r'operation="([^"]+)"', line)
            if m:
                counts[m.group(1)] += int(float(line.rsplit(" ", 1)[1]))
    return counts
