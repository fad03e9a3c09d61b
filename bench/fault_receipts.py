"""The fault benchmark's count of receipts: waited for (bounded) until every one of the run is
closed, then counted by outcome, usage and close reason, with how long the longest of each close
reason stayed open and when the swept ones were claimed; and the claims the API undid after they
landed late, from its logs."""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from sqlalchemy import extract, func, select
from sqlmodel import col

from bench.invoke_config import TENANT
from store.db import create_engine, session_factory
from store.tables import InvocationReceiptRow

KEY_PREFIX = "bench-fault-"
# The bound on waiting for every receipt to close after the load. The workflows retry a close
# the store refused at most 10 s apart, and a call on the killed API is closed by its workflow
# on the worker. A call claimed on the killed API whose start Temporal had not yet accepted has
# no workflow: the receipt sweeper closes it, on its production settings (every minute, open
# past the start's 5 s bound and a 25 s margin), so about 30-90 s after its claim; any other
# receipt a workflow left open waits out the budget and the grace (250 s), hence this bound.
CLOSE_WAIT_SECONDS = 360.0


@dataclass
class Receipts:
    total: int = 0
    closed: int = 0
    by_outcome: dict[str, int] = field(default_factory=dict)  # "Completed / Reported" -> n
    by_reason: dict[str, int] = field(default_factory=dict)  # close reason -> n
    closed_after: float | None = None  # seconds after the load until the last one closed
    # close reason -> the longest any receipt closed so stayed open, claim to close (s)
    longest_open: dict[str, float] = field(default_factory=dict)
    # the swept receipts' claims (not in the progress line: one timestamp each)
    swept_at: list[datetime] = field(default_factory=list, repr=False)


async def count_receipts(database_url: str, into: Receipts) -> None:
    """Wait (bounded) until every receipt of the run is closed, then count them."""
    engine = create_engine(database_url)
    sessions = session_factory(engine)
    receipt = InvocationReceiptRow
    ours = col(receipt.idempotency_key).like(f"{KEY_PREFIX}%")
    mine = (col(receipt.tenant_id) == TENANT) & ours
    ended = col(receipt.ended_at).is_not(None)
    groups = (col(receipt.outcome), col(receipt.usage_status), col(receipt.close_reason), ended)
    waited = time.monotonic()
    try:
        while True:
            async with sessions() as session:
                rows = (
                    await session.execute(
                        select(*groups, func.count()).where(mine).group_by(*groups)
                    )
                ).all()
            into.total = sum(n for *_, n in rows)
            into.closed = sum(n for *_, is_closed, n in rows if is_closed)
            if into.closed == into.total:
                into.closed_after = time.monotonic() - waited
                break
            if time.monotonic() - waited > CLOSE_WAIT_SECONDS:
                break
            await asyncio.sleep(0.5)  # a poll interval while the last workflows close
        async with sessions() as session:
            spans = (
                await session.execute(
                    select(
                        col(receipt.close_reason),
                        func.max(extract("epoch", col(receipt.ended_at) - col(receipt.started_at))),
                    )
                    .where(mine & ended)
                    .group_by(col(receipt.close_reason))
                )
            ).all()
        into.longest_open = {reason or "—": float(span) for reason, span in spans}
        async with sessions() as session:
            into.swept_at = list(
                (
                    await session.scalars(
                        select(col(receipt.started_at)).where(
                            mine & (col(receipt.close_reason) == "swept")
                        )
                    )
                ).all()
            )
    finally:
        await engine.dispose()
    into.by_outcome, into.by_reason = {}, {}
    for outcome, usage, reason, is_closed, n in rows:
        what = f"{outcome} / usage {usage}" if is_closed else "open"
        into.by_outcome[what] = into.by_outcome.get(what, 0) + n
        if is_closed:
            into.by_reason[reason or "—"] = into.by_reason.get(reason or "—", 0) + n


def undone_late_claims(work: Path) -> int:
    """How many claims the API processes undid after they landed late (api/given_up_claims.py),
    from their logs (the killed one's included)."""
    return sum(
        int(found)
        for log in work.glob("api*.log")
        for found in re.findall(r"undid (\d+) claims that landed", log.read_text(errors="replace"))
    )
