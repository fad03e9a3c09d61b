"""The invoke path's durable steps as single Core statements on a pool without pre-ping: the
claim, the release of a claim nothing was called for, the finalise, and the catalog version.

Measured on the invoke benchmark: an ORM session per step with `pool_pre_ping` cost 26
statements (BEGIN, ping, SELECT, … COMMIT) per invocation; this module makes it three on
PostgreSQL — the catalog version, the claim, the finalise — each one round trip.

- The claim is `INSERT … ON CONFLICT DO NOTHING RETURNING`: it also says whether the key was
  used (a read happens only on that conflict, by the caller).
- The finalise is one statement on PostgreSQL: `WITH closed AS (UPDATE … RETURNING) INSERT INTO
  outbox_events … SELECT … FROM closed`, atomic as any single statement, and a no-op on a
  receipt already closed (the first close wins). SQLite has no DML in a CTE: there it is the
  update and the insert in one transaction.
- No pre-ping: a connection that dropped (a database restart) fails its statement; that
  statement is tried once more on a fresh connection, then the error surfaces (the callers turn
  it into a 503 or hand the close to the workflow).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from domain.close_reason import close_reason
from domain.enums import InvocationOutcome, UsageStatus
from domain.events import TOPICS, model_invoked
from domain.invocation import InvocationInput, InvocationSummary
from store.tables import CatalogStateRow, InvocationReceiptRow, OutboxEventRow

T = TypeVar("T")
RECEIPTS: sa.Table = InvocationReceiptRow.__table__  # type: ignore[attr-defined]
OUTBOX: sa.Table = OutboxEventRow.__table__  # type: ignore[attr-defined]
CATALOG: sa.Table = CatalogStateRow.__table__  # type: ignore[attr-defined]


# What a claim writes and a finalise sets: the statements are built once with these as bind
# parameters. Building them per call (`.values(...)` with literals) made a BindParameter per
# value on every call: 13% of the API's CPU at c=16 under py-spy (bench/profile_invoke.py,
# 2026-12-01), more than the three round trips themselves.
_CLAIMED = (
    "invocation_id",
    "tenant_id",
    "project_id",
    "run_id",
    "attempt_id",
    "profile_id",
    "deployment_id",
    "route_plan_id",
    "fallback_used",
    "request_hash",
    "idempotency_key",
    "policy_decision_id",
    "outcome",
    "usage_status",
    "pricing_revision",
    "started_at",
)
_CLOSED = (
    "outcome",
    "usage_status",
    "deployment_id",
    "input_tokens",
    "output_tokens",
    "cached_input_tokens",
    "estimated_cost_usd",
    "latency_ms",
    "time_to_first_token_ms",
    "output_artifact_ref",
    "provider_request_id",
    "fallback_used",
    "close_reason",
    "ended_at",
)
_EVENT = (
    "event_id",
    "tenant_id",
    "event_type",
    "topic",
    "aggregate_type",
    "aggregate_id",
    "payload",
    "occurred_at",
)


def _close_update() -> Any:
    """The finalise's UPDATE, its values and keys as bind parameters (`set_*`, `w_*`: a bind
    parameter may not share a column's name in a SET clause)."""
    return (
        sa.update(RECEIPTS)
        .where(
            RECEIPTS.c.tenant_id == sa.bindparam("w_tenant_id"),
            RECEIPTS.c.invocation_id == sa.bindparam("w_invocation_id"),
            RECEIPTS.c.ended_at.is_(None),
        )
        .values({k: sa.bindparam(f"set_{k}", type_=RECEIPTS.c[k].type) for k in _CLOSED})
    )


def _close_with_events(count: int) -> Any:
    """PostgreSQL's one-statement finalise for `count` outbox events (`e{i}_*` parameters)."""
    closed = _close_update().returning(RECEIPTS.c.invocation_id).cte("closed")
    rows = [
        sa.select(
            *(sa.bindparam(f"e{i}_{k}", type_=OUTBOX.c[k].type).label(k) for k in _EVENT)
        ).select_from(closed)
        for i in range(count)
    ]
    source = rows[0] if count == 1 else sa.union_all(*rows)
    return sa.insert(OUTBOX).from_select(list(_EVENT), source).returning(OUTBOX.c.position)


class ReceiptStatements:
    def __init__(self, engine: AsyncEngine) -> None:
        self._postgres = engine.dialect.name == "postgresql"
        # Every step on PostgreSQL is one statement, atomic by itself: autocommit spares the
        # BEGIN and COMMIT round trips around it (9 -> 3 statements per invocation). SQLite's
        # two-statement finalise keeps its transaction.
        self._engine = (
            engine.execution_options(isolation_level="AUTOCOMMIT") if self._postgres else engine
        )
        insert = postgresql.insert if self._postgres else sqlite.insert
        self._claim = insert(RECEIPTS).on_conflict_do_nothing().returning(RECEIPTS.c.invocation_id)
        self._version = sa.select(CATALOG.c.version).where(CATALOG.c.id == 1)
        self._release = sa.delete(RECEIPTS).where(
            RECEIPTS.c.tenant_id == sa.bindparam("w_tenant_id"),
            RECEIPTS.c.invocation_id == sa.bindparam("w_invocation_id"),
            RECEIPTS.c.ended_at.is_(None),
        )
        self._update = _close_update()
        # One ModelInvoked, and a ModelFallbackUsed beside it when a fallback answered.
        self._close = {1: _close_with_events(1), 2: _close_with_events(2)}

    async def _run(self, step: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        """One statement (or one transaction), tried once more when its connection turned out
        dead: the pool is not pinged before each checkout."""
        for attempt in (1, 2):
            try:
                async with self._engine.begin() as conn:
                    return await step(conn)
            except DBAPIError as exc:
                if attempt == 2 or not exc.connection_invalidated:
                    raise
        raise AssertionError("unreachable")

    async def catalog_version(self) -> int:
        async def step(conn: AsyncConnection) -> int:
            found = await conn.scalar(self._version)
            return int(found or 0)

        return await self._run(step)

    async def claim(self, data: InvocationInput, deployment_id: str) -> bool:
        """Insert the in-flight receipt (Failed, usage Unknown until finalised); False when this
        invocation, or this key, was claimed before."""
        params = {
            "invocation_id": data.invocation_id,
            "tenant_id": data.tenant_id,
            "project_id": data.project_id,
            "run_id": data.run_id,
            "attempt_id": data.attempt_id,
            "profile_id": data.profile_id,
            "deployment_id": deployment_id,
            "route_plan_id": data.route_plan_id,
            "fallback_used": False,
            "request_hash": data.request_hash,
            "idempotency_key": data.idempotency_key,
            "policy_decision_id": data.policy_decision_id,
            "outcome": InvocationOutcome.FAILED,
            "usage_status": UsageStatus.UNKNOWN,
            "pricing_revision": data.pricing_revision,
            "started_at": datetime.now(UTC),
        }

        async def step(conn: AsyncConnection) -> bool:
            return (await conn.execute(self._claim, params)).first() is not None

        return await self._run(step)

    async def release(self, tenant_id: str, invocation_id: uuid.UUID) -> None:
        """Undo a claim nothing was called for (its workflow could not be started)."""
        params = {"w_tenant_id": tenant_id, "w_invocation_id": invocation_id}

        async def step(conn: AsyncConnection) -> None:
            await conn.execute(self._release, params)

        await self._run(step)

    async def finalize(self, data: InvocationInput, summary: InvocationSummary) -> bool:
        """Close the in-flight receipt with what the call produced, with its ModelInvoked (and
        ModelFallbackUsed) in the same statement; False if it was already closed."""
        outcome = summary.outcome or InvocationOutcome.FAILED
        usage = summary.usage_status or UsageStatus.UNKNOWN
        deployment = summary.deployment_id or data.targets[0].deployment_id
        values: dict[str, Any] = {
            "outcome": outcome,
            "usage_status": usage,
            "deployment_id": deployment,
            "input_tokens": summary.input_tokens,
            "output_tokens": summary.output_tokens,
            "cached_input_tokens": summary.cached_input_tokens,
            "estimated_cost_usd": summary.estimated_cost_usd,
            "latency_ms": summary.latency_ms,
            "time_to_first_token_ms": summary.time_to_first_token_ms,
            "output_artifact_ref": summary.output_artifact_ref,
            "provider_request_id": summary.provider_request_id,
            "fallback_used": summary.fallback_used,
            "close_reason": close_reason(outcome, summary.error_kind).value,
            "ended_at": datetime.now(UTC),
        }
        params = {f"set_{k}": v for k, v in values.items()}
        params["w_tenant_id"] = data.tenant_id
        params["w_invocation_id"] = summary.invocation_id
        events = _events(data, summary, outcome, usage, deployment)
        if self._postgres:
            stmt = self._close[len(events)]
            for i, event in enumerate(events):
                params.update({f"e{i}_{k}": v for k, v in event.items()})

            async def one(conn: AsyncConnection) -> bool:
                return (await conn.execute(stmt, params)).first() is not None

            return await self._run(one)

        async def two(conn: AsyncConnection) -> bool:
            if (await conn.execute(self._update, params)).rowcount == 0:
                return False
            await conn.execute(sa.insert(OUTBOX), events)
            return True

        return await self._run(two)


def _events(
    data: InvocationInput,
    summary: InvocationSummary,
    outcome: InvocationOutcome,
    usage: UsageStatus,
    deployment: str,
) -> list[dict[str, Any]]:
    now = datetime.now(UTC)
    invoked = model_invoked(
        invocation_id=str(summary.invocation_id),
        tenant_id=data.tenant_id,
        project_id=data.project_id,
        run_id=str(data.run_id) if data.run_id else None,
        attempt_id=str(data.attempt_id) if data.attempt_id else None,
        profile_id=data.profile_id,
        deployment_id=deployment,
        outcome=outcome.value,
        usage_status=usage.value,
        input_tokens=summary.input_tokens,
        output_tokens=summary.output_tokens,
        estimated_cost_usd=summary.estimated_cost_usd,
    )
    found = [_row(data.tenant_id, invoked, now)]
    if summary.fallback_used:
        found.append(
            _row(
                data.tenant_id,
                {
                    "event_type": "ModelFallbackUsed",
                    "topic": TOPICS["ModelFallbackUsed"],
                    "aggregate_type": "InvocationReceipt",
                    "payload": {
                        "invocationId": str(summary.invocation_id),
                        "tenantId": data.tenant_id,
                        "profileId": data.profile_id,
                        "fromDeploymentId": summary.fallback_from,
                        "toDeploymentId": deployment,
                        "reason": summary.fallback_reason,
                    },
                },
                now,
            )
        )
    return found


def _row(tenant_id: str, event: dict[str, Any], now: datetime) -> dict[str, Any]:
    return {
        "event_id": uuid.uuid4(),
        "tenant_id": tenant_id,
        "event_type": event["event_type"],
        "topic": event["topic"],
        "aggregate_type": event["aggregate_type"],
        "aggregate_id": event.get("aggregate_id") or event["payload"]["invocationId"],
        "payload": event["payload"],
        "occurred_at": now,
    }
