"""The durable receipts behind the gateway calls: that every call has a closed one and the
upstream saw one call per invocation, and each call's timeline from the client's clock and
its receipt's timestamps."""

from __future__ import annotations

from dataclasses import dataclass

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col, select

from bench.invoke_config import MODEL_GATEWAY, TENANT
from bench.invoke_load import Path_
from domain.enums import InvocationOutcome, UsageStatus
from store.tables import InvocationReceiptRow


@dataclass
class ReceiptCheck:
    sent: int
    found: int
    closed: int
    completed: int
    missing: list[str]
    upstream_calls: int
    decomposition: dict[str, dict[str, list[float]]]  # group -> part -> ms (non-stream c=1)
    receipt_ttft_ms: list[float]


async def check_receipts(
    sessions: async_sessionmaker[AsyncSession], gateway: Path_, upstream: str
) -> ReceiptCheck:
    async with sessions() as session:
        rows = (
            await session.scalars(
                select(InvocationReceiptRow)
                .where(col(InvocationReceiptRow.tenant_id) == TENANT)
                .where(col(InvocationReceiptRow.idempotency_key).like("bench-gw-%"))
            )
        ).all()
    by_key = {r.idempotency_key: r for r in rows}
    closed = [r for r in rows if r.ended_at is not None]
    completed = [
        r
        for r in closed
        if r.outcome == InvocationOutcome.COMPLETED
        and r.usage_status == UsageStatus.REPORTED
        and r.output_artifact_ref
        and r.estimated_cost_usd is not None
    ]
    missing = [k for k in gateway.sent if k not in by_key or by_key[k].ended_at is None]
    async with httpx.AsyncClient(timeout=10) as http:
        stats = (await http.get(f"{upstream}/_admin/stats")).json()
    calls = sum(stats["models"].get(MODEL_GATEWAY, {}).values())
    # Timeline of each gateway call from the client's clock and the receipt's timestamps (the
    # API's clock; same machine): before the claim, claim to finalize (the provider call inside
    # it, as the activity timed it), after the finalize.
    parts: dict[str, dict[str, list[float]]] = {}
    ttft: list[float] = []
    for key, sent in gateway.sent.items():
        row = by_key.get(key)
        if row is None or row.ended_at is None or row.latency_ms is None or sent is None:
            continue
        if key.startswith("bench-gw-st1-") and row.time_to_first_token_ms is not None:
            ttft.append(float(row.time_to_first_token_ms))
        group = next(
            (g for g in ("ns1", "paced", "idle") if key.startswith(f"bench-gw-{g}-")), None
        )
        if group is None:
            continue
        total, wall0, wall1 = sent
        into = parts.setdefault(group, {})
        for name, value in (
            ("client", total * 1000),
            ("before", (row.started_at.timestamp() - wall0) * 1000),
            ("window", (row.ended_at - row.started_at).total_seconds() * 1000),
            ("provider", float(row.latency_ms)),
            ("after", (wall1 - row.ended_at.timestamp()) * 1000),
        ):
            into.setdefault(name, []).append(value)
    return ReceiptCheck(
        len(gateway.sent), len(rows), len(closed), len(completed), missing, calls, parts, ttft
    )
