"""The SQL of a receipt's writes, built once: the tables, the close's UPDATE and its outbox rows,
PostgreSQL's one-statement finalise and the claim with its catalog version check, and the
parameters of one close. `store/receipt_statements.py` runs them."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from domain.invocation import InvocationInput, InvocationSummary
from domain.receipt_fields import (
    claim_values,
    close_values,
    fallback_answered,
    fallback_used,
    model_invoked,
)
from store.routing_tables import CatalogStateRow
from store.tables import InvocationReceiptRow, OutboxEventRow

RECEIPTS: sa.Table = InvocationReceiptRow.__table__  # type: ignore[attr-defined]
OUTBOX: sa.Table = OutboxEventRow.__table__  # type: ignore[attr-defined]
CATALOG: sa.Table = CatalogStateRow.__table__  # type: ignore[attr-defined]
EVENT = (
    "event_id",
    "tenant_id",
    "event_type",
    "topic",
    "aggregate_type",
    "aggregate_id",
    "payload",
    "occurred_at",
)


# The statements are built once per set of columns, their values bind parameters. Building them
# per call (`.values(...)` with literals) made a BindParameter per value on every call: 13% of
# the API's CPU at c=16 under py-spy (bench/profile_invoke.py, 2026-12-01), more than the three
# round trips themselves. A close writes one of two column sets (with or without the answering
# deployment), so the caches stay at a handful of entries.
@functools.cache
def close_update(columns: tuple[str, ...]) -> Any:
    """The close's UPDATE of `columns` (`set_*` parameters; the keys `w_*`: a bind parameter
    may not share a column's name in a SET clause)."""
    return (
        sa.update(RECEIPTS)
        .where(
            RECEIPTS.c.tenant_id == sa.bindparam("w_tenant_id"),
            RECEIPTS.c.invocation_id == sa.bindparam("w_invocation_id"),
            RECEIPTS.c.ended_at.is_(None),
        )
        .values({k: sa.bindparam(f"set_{k}", type_=RECEIPTS.c[k].type) for k in columns})
    )


@functools.cache
def close_with_events(columns: tuple[str, ...], count: int) -> Any:
    """PostgreSQL's one-statement finalise with `count` outbox events (`e{i}_*` parameters)."""
    closed = close_update(columns).returning(RECEIPTS.c.invocation_id).cte("closed")
    rows = [
        sa.select(
            *(sa.bindparam(f"e{i}_{k}", type_=OUTBOX.c[k].type).label(k) for k in EVENT)
        ).select_from(closed)
        for i in range(count)
    ]
    source = rows[0] if count == 1 else sa.union_all(*rows)
    return sa.insert(OUTBOX).from_select(list(EVENT), source).returning(OUTBOX.c.position)


@functools.cache
def claim_at_version(columns: tuple[str, ...]) -> Any:
    """PostgreSQL's claim that also checks the catalog version its route was planned at, in one
    statement (`c_*` parameters and `expected_version`): 1 claimed, 0 a used key, -1 the catalog
    moved since (nothing written). Both reads are of the statement's one snapshot."""
    current = sa.func.coalesce(
        sa.select(CATALOG.c.version).where(CATALOG.c.id == 1).scalar_subquery(), 0
    )
    expected = sa.bindparam("expected_version", type_=CATALOG.c.version.type)
    source = sa.select(
        *(sa.bindparam(f"c_{k}", type_=RECEIPTS.c[k].type).label(k) for k in columns)
    ).where(current == expected)
    claimed = (
        postgresql.insert(RECEIPTS)
        .from_select(list(columns), source)
        .on_conflict_do_nothing()
        .returning(RECEIPTS.c.invocation_id)
        .cte("claimed")
    )
    inserted = sa.select(sa.func.count()).select_from(claimed).scalar_subquery()
    return sa.select(sa.case((current != expected, -1), else_=inserted))


def close_parts(
    data: InvocationInput, summary: InvocationSummary, now: datetime
) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """A close's column values, its statement's parameters (`set_*`, the keys `w_*`) and its
    outbox rows."""
    values = close_values(summary, now)
    receipt = {**claim_values(data, data.targets[0].deployment_id, now), **values}
    events = [outbox_row(data.tenant_id, e, now) for e in events_of(receipt, summary)]
    params = {f"set_{k}": v for k, v in values.items()}
    params["w_tenant_id"] = data.tenant_id
    params["w_invocation_id"] = summary.invocation_id
    return values, params, events


def events_of(
    receipt: Mapping[str, Any], summary: InvocationSummary | None
) -> list[dict[str, Any]]:
    found = [model_invoked(receipt)]
    if summary is not None and fallback_answered(summary):
        found.append(fallback_used(receipt, summary))
    return found


def outbox_row(tenant_id: str, event: dict[str, Any], now: datetime) -> dict[str, Any]:
    return {
        "event_id": uuid.uuid4(),
        "tenant_id": tenant_id,
        "event_type": event["event_type"],
        "topic": event["topic"],
        "aggregate_type": event["aggregate_type"],
        "aggregate_id": event["aggregate_id"],
        "payload": event["payload"],
        "occurred_at": now,
    }
