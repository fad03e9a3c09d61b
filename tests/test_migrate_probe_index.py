"""The prune of probe samples past their retention (store/probes.prune_samples, by
`window_start`) reads them through an index: the table had only the window's unique key, which
leads with the tenant, and an index of `probed_at`, so each prune read every sample."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import event, text

from store.db import create_engine, session_factory
from store.migrate import upgrade
from store.probes import prune_samples
from tests.conftest import create_database, drop_database


async def test_the_prune_of_probe_samples_uses_the_window_index() -> None:
    url = await create_database("mr_migrate_probe")
    engine = create_engine(url)
    try:
        await asyncio.to_thread(upgrade, url)
        start = datetime(2026, 12, 1, tzinfo=UTC)
        async with engine.begin() as conn:
            await conn.execute(
                text(
                    "INSERT INTO probe_samples (tenant_id, deployment_id, window_start,"
                    " probed_at, outcome, attempt)"
                    " SELECT 't', 'd' || (n % 20), at, at, 'ok', 1"
                    " FROM generate_series(0, 999) AS n,"
                    " LATERAL (SELECT CAST(:start AS timestamptz) + n * interval '2 minutes')"
                    " AS w(at)"
                ),
                {"start": start},
            )
            await conn.execute(text("ANALYZE probe_samples"))

        # The statement prune_samples sends, as it sends it, seen on its way to the driver.
        sent: list[tuple[str, Any]] = []

        def seen(_conn: Any, _cursor: Any, statement: str, params: Any, *_: Any) -> None:
            if statement.lstrip().upper().startswith("DELETE FROM PROBE_SAMPLES"):
                sent.append((statement, params))

        event.listen(engine.sync_engine, "before_cursor_execute", seen)
        async with session_factory(engine)() as session, session.begin():
            pruned = await prune_samples(session, start + timedelta(hours=1))
        event.remove(engine.sync_engine, "before_cursor_execute", seen)
        assert pruned == 30 and len(sent) == 1

        async with engine.connect() as conn:
            # Whether the index can serve the prune at all, whatever the table's size: a small
            # table is read whole whichever indexes it has. Forbidding that (and nothing else),
            # the planner still had the unique key, which it read from end to end.
            await conn.execute(text("SET enable_seqscan = off"))
            statement, params = sent[0]
            plan = "\n".join(
                row[0] for row in await conn.exec_driver_sql(f"EXPLAIN {statement}", params)
            )
        assert "ix_probe_samples_window_start" in plan, plan
    finally:
        await engine.dispose()
        await drop_database(url)
