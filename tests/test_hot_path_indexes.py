"""The invoke path's receipt statements find their receipt by its own keys, whatever other
indexes the receipts table gains: on a fresh, never analyzed table (a new deployment, or a
tenant the statistics have not seen yet), PostgreSQL may join any index on `tenant_id` to the
primary key in a bitmap AND and read every receipt of the tenant for each call. A plain
(tenant_id, started_at) index for the console did exactly that (migration 0008)."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
from sqlalchemy.engine import make_url

from store.db import create_engine
from store.migrate import upgrade
from store.receipt_statements import ReceiptStatements
from tests.conftest import create_database, drop_database
from tests.helpers.deadline import eventually
from tests.helpers.invocations import completed, invocation_input

# What the claim, the close and a replay may read: the receipt's id, its tenant's key, and the
# open receipts (few at any time).
OWN_KEYS = {"invocation_receipts_pkey", "uq_receipts_idempotency", "ix_receipts_open"}
CALLS = 300


async def _index_reads(url: str) -> dict[str, tuple[int, int]] | None:
    """Scans and entries read per index of the receipts, once every close is published."""
    db = make_url(url)
    conn = await asyncpg.connect(host=db.host, port=db.port, user=db.username, database=db.database)
    try:
        closed = await conn.fetchval(
            "SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = 'invocation_receipts'"
        )
        rows = await conn.fetch(
            "SELECT indexrelname, idx_scan, idx_tup_read FROM pg_stat_user_indexes "
            "WHERE relname = 'invocation_receipts'"
        )
    finally:
        await conn.close()
    if (closed or 0) < CALLS:
        return None
    return {r["indexrelname"]: (int(r["idx_scan"]), int(r["idx_tup_read"])) for r in rows}


async def test_the_claim_and_close_read_only_the_receipts_own_keys() -> None:
    url = await create_database("mr_hot_indexes")
    try:
        await asyncio.to_thread(upgrade, url)
        engine = create_engine(url, pool_size=2, pre_ping=False)
        statements = ReceiptStatements(engine, direct=True)
        tenant = f"t-{uuid.uuid4().hex[:8]}"
        try:
            for _ in range(CALLS):
                data = invocation_input(tenant)
                await statements.catalog_version()
                assert await statements.claim(data, "sim/a")
                assert await statements.finalize(data, completed(data))
        finally:
            await statements.aclose()
            await engine.dispose()

        # Backends publish their statistics when idle, at most once a second.
        reads = await eventually(lambda: _index_reads(url), timeout=30)
        assert reads is not None
        used = {name for name, (scans, _) in reads.items() if scans}
        assert used <= OWN_KEYS, reads
        # A handful of entries a scan: the open receipt and versions not yet pruned (5.5 a
        # scan measured here), not the tenant's receipts (1,060 a scan after 2,000 calls).
        for name, (scans, read) in reads.items():
            assert read <= 20 * scans, (name, reads)
    finally:
        await drop_database(url)
