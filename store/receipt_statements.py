"""Every write of a receipt, as Core statements on a pool without pre-ping. On the invoke path:
the claim, the release of a claim nothing was called for, the finalise, and the catalog
version; off it: the workflow's close (`close`), the sweeper's (`sweep`) and a denial's (`deny`).
Column values and events come from the one receipt mapping, `domain/receipt_fields.py`.

Measured on the invoke benchmark: an ORM session per step with `pool_pre_ping` cost 26
statements (BEGIN, ping, SELECT, … COMMIT) per invocation; this module makes it two on
PostgreSQL — the claim with its catalog version check (`claim_at`), the finalise — each one
round trip, three when the version is read first. For the API's invoke path (`direct=True`)
they run straight on asyncpg (`store/asyncpg_path.py`), compiled once from the statements
`store/receipt_sql.py` builds: the same SQL, 0.5-0.7 ms less client CPU per invocation than
through SQLAlchemy's asyncio layer (bench/bench_receipt_statements.py).

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

import enum
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.pool import QueuePool

from domain.close_reason import CloseReason
from domain.enums import InvocationOutcome, UsageStatus
from domain.invocation import InvocationInput, InvocationSummary
from domain.receipt_fields import claim_values, close_values, summary_of
from store.asyncpg_path import AsyncpgPath, Compiled
from store.receipt_sql import (
    CATALOG,
    OUTBOX,
    RECEIPTS,
    claim_at_version,
    close_parts,
    close_update,
    close_with_events,
    events_of,
    outbox_row,
)

T = TypeVar("T")


class Claim(enum.Enum):
    """What a claim at a catalog version found."""

    CLAIMED = 1
    USED = 0  # this invocation, or its key, was claimed before
    STALE = -1  # the catalog moved past the version the route was planned at: nothing written


class ReceiptStatements:
    def __init__(
        self, engine: AsyncEngine, *, direct: bool = False, wait: float | None = None
    ) -> None:
        """`direct`: on PostgreSQL, the catalog version, the claim and the finalise run straight
        on asyncpg (`store/asyncpg_path.py`) on a pool of their own, as large as `engine`'s
        (closed by `aclose`), each wait there bounded by `wait` seconds. The API's invoke path
        sets it; off that path (the standalone worker, the sweeper) and on SQLite every
        statement stays on SQLAlchemy Core."""
        self._postgres = engine.dialect.name == "postgresql"
        self._direct: AsyncpgPath | None = None
        if self._postgres and direct:
            size = engine.pool.size() if isinstance(engine.pool, QueuePool) else 10
            self._direct = AsyncpgPath(engine, max_size=size, wait=wait)
        self._dialect_engine = engine
        self._compiled: dict[tuple[Any, ...], Compiled] = {}
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
        # The closes off the hot path (the workflow's, the sweeper's, a denial's) lock the row
        # in a transaction, as they know only the invocation id: the event needs the row.
        self._transactions = engine

    async def aclose(self) -> None:
        """Close the asyncpg pool (the engines are the caller's to dispose)."""
        if self._direct is not None:
            await self._direct.close()

    def _for_asyncpg(self, key: tuple[Any, ...], stmt: Any, keys: Any = None) -> Compiled:
        found = self._compiled.get(key)
        if found is None:
            found = self._compiled[key] = Compiled(self._dialect_engine, stmt, keys)
        return found

    async def _run(
        self, step: Callable[[AsyncConnection], Awaitable[T]], engine: AsyncEngine | None = None
    ) -> T:
        """One statement (or one transaction), tried once more when its connection turned out
        dead: the pool is not pinged before each checkout."""
        for attempt in (1, 2):
            try:
                async with (engine or self._engine).begin() as conn:
                    return await step(conn)
            except DBAPIError as exc:
                if attempt == 2 or not exc.connection_invalidated:
                    raise
        raise AssertionError("unreachable")

    async def catalog_version(self) -> int:
        if self._direct is not None:
            stmt = self._for_asyncpg(("version",), self._version)
            return int(await self._direct.fetchval(stmt, {}) or 0)

        async def step(conn: AsyncConnection) -> int:
            found = await conn.scalar(self._version)
            return int(found or 0)

        return await self._run(step)

    async def claim(
        self, data: InvocationInput, deployment_id: str, at: datetime | None = None
    ) -> bool:
        """Insert the in-flight receipt (Failed, usage Unknown until finalised), started `at`
        (now); False when this invocation, or this key, was claimed before."""
        params = claim_values(data, deployment_id, at or datetime.now(UTC))
        if self._direct is not None:
            columns = tuple(params)
            stmt = self._for_asyncpg(("claim", columns), self._claim, columns)
            return await self._direct.fetchval(stmt, params) is not None

        async def step(conn: AsyncConnection) -> bool:
            return (await conn.execute(self._claim, params)).first() is not None

        return await self._run(step)

    async def claim_at(
        self, data: InvocationInput, deployment_id: str, version: int, at: datetime | None = None
    ) -> Claim:
        """The claim of a route planned on the catalog at `version` (the snapshot this process
        had, its version not read for this call): written only if that is still the current
        version, so the call sees every committed catalog write, as if it had read the version
        first. Straight on asyncpg it is one statement: the version read and the claim in one
        round trip (2 statements per invocation instead of 3). Elsewhere, the two statements."""
        if self._direct is None:
            if await self.catalog_version() != version:
                return Claim.STALE
            return Claim.CLAIMED if await self.claim(data, deployment_id, at) else Claim.USED
        params = claim_values(data, deployment_id, at or datetime.now(UTC))
        columns = tuple(params)
        stmt = self._for_asyncpg(("claim_at", columns), claim_at_version(columns))
        args = {f"c_{k}": v for k, v in params.items()}
        args["expected_version"] = version
        return Claim(int(await self._direct.fetchval(stmt, args)))

    async def release(self, tenant_id: str, invocation_id: uuid.UUID) -> None:
        """Undo a claim nothing was called for (its workflow could not be started)."""
        keys = {"w_tenant_id": tenant_id, "w_invocation_id": invocation_id}

        async def step(conn: AsyncConnection) -> None:
            await conn.execute(self._release, keys)

        await self._run(step)

    async def release_given_up(
        self, claims: Sequence[tuple[uuid.UUID, datetime]]
    ) -> set[uuid.UUID]:
        """Undo claims this process gave up on (their statement unanswered, the caller told
        nothing was claimed) that have landed since: each only if still open and still the one
        made then (its start time), never a later claim of the same key. Those undone."""
        if not claims:
            return set()
        stmt = (
            sa.delete(RECEIPTS)
            .where(sa.tuple_(RECEIPTS.c.invocation_id, RECEIPTS.c.started_at).in_(list(claims)))
            .where(RECEIPTS.c.ended_at.is_(None))
            .returning(RECEIPTS.c.invocation_id)
        )

        async def step(conn: AsyncConnection) -> set[uuid.UUID]:
            return {row[0] for row in await conn.execute(stmt)}

        return await self._run(step)

    async def finalize(self, data: InvocationInput, summary: InvocationSummary) -> bool:
        """Close the in-flight receipt with what the call produced, with its ModelInvoked (and
        ModelFallbackUsed) in the same statement; False if it was already closed."""
        values, params, events = close_parts(data, summary, datetime.now(UTC))
        columns = tuple(values)
        if self._postgres:
            for i, event in enumerate(events):
                params.update({f"e{i}_{k}": v for k, v in event.items()})
            stmt = close_with_events(columns, len(events))
            if self._direct is not None:
                compiled = self._for_asyncpg(("finalize", columns, len(events)), stmt)
                return await self._direct.fetchval(compiled, params) is not None

            async def one(conn: AsyncConnection) -> bool:
                return (await conn.execute(stmt, params)).first() is not None

            return await self._run(one)

        async def two(conn: AsyncConnection) -> bool:
            if (await conn.execute(close_update(columns), params)).rowcount == 0:
                return False
            await conn.execute(sa.insert(OUTBOX), events)
            return True

        return await self._run(two)

    async def closed_as(self, tenant_id: str, invocation_id: uuid.UUID) -> InvocationSummary | None:
        """A closed receipt as a replay tells it (domain/receipt_fields.summary_of); None while
        it is open or when there is none. Off the hot path: read only by a call whose own close
        found the receipt closed by another."""
        stmt = sa.select(RECEIPTS).where(
            RECEIPTS.c.tenant_id == tenant_id, RECEIPTS.c.invocation_id == invocation_id
        )

        async def step(conn: AsyncConnection) -> InvocationSummary | None:
            found = (await conn.execute(stmt)).mappings().first()
            return None if found is None or found["ended_at"] is None else summary_of(dict(found))

        return await self._run(step, self._transactions)

    async def close(self, tenant_id: str, summary: InvocationSummary) -> bool:
        """`finalize` for a caller that has only the summary (the workflow's `finalize_receipt`,
        whose input carries no InvocationInput): the same columns and events, the rest of the
        event read from the locked row; False if it was already closed."""
        values = close_values(summary, datetime.now(UTC))
        return await self._close_locked(tenant_id, summary.invocation_id, values, summary)

    async def sweep(self, tenant_id: str, invocation_id: uuid.UUID, started_at: datetime) -> bool:
        """Close the receipt left open that was claimed at `started_at`: Failed, usage Unknown
        (the provider may have done billable work), close reason `swept`, with its ModelInvoked.
        False if it closed meanwhile, or is gone. Never a later claim of the same key (its
        invocation id is the key's): a claim undone after the sweeper listed it, and claimed
        again by the caller's retry, is that retry's live call, whose workflow the sweeper may
        have looked for before its start was in."""
        values = {
            "outcome": InvocationOutcome.FAILED,
            "usage_status": UsageStatus.UNKNOWN,
            "close_reason": CloseReason.SWEPT.value,
            "error_kind": CloseReason.SWEPT.value,  # the router's own kind for it
            "ended_at": datetime.now(UTC),
        }
        return await self._close_locked(
            tenant_id, invocation_id, values, None, started_at=started_at
        )

    async def close_claim(
        self, tenant_id: str, started_at: datetime, summary: InvocationSummary
    ) -> bool:
        """Close the one claim made at `started_at` (the claim the API made before starting the
        workflow that closes it), never a later claim of the same key; False if that claim was
        closed already or undone."""
        values = close_values(summary, datetime.now(UTC))
        return await self._close_locked(
            tenant_id, summary.invocation_id, values, summary, started_at=started_at
        )

    async def deny(self, data: InvocationInput, reason: str) -> InvocationSummary | None:
        """A denied invocation gets a receipt too; nothing reached the provider, so its usage is
        our own count: zero. Its claim and close are one transaction: as two statements, a
        store lost between them left the denial open for the sweeper to close Failed. None
        when the key was claimed before (a call in flight, or answered): that is the key's
        replay or reuse, not a denial, and its receipt is left as it is. Claimed or not, the
        close used to follow, closing a call in flight Denied."""
        deployment = data.targets[0].deployment_id
        summary = InvocationSummary(
            invocation_id=data.invocation_id,
            outcome=InvocationOutcome.DENIED,
            usage_status=UsageStatus.ESTIMATED,
            deployment_id=deployment,
            input_tokens=0,
            output_tokens=0,
            error_kind=reason,
        )
        now = datetime.now(UTC)
        claim = claim_values(data, deployment, now)
        values, close, events = close_parts(data, summary, now)

        async def step(conn: AsyncConnection) -> bool:
            if (await conn.execute(self._claim, claim)).first() is None:
                return False
            await conn.execute(close_update(tuple(values)), close)
            await conn.execute(sa.insert(OUTBOX), events)
            return True

        return summary if await self._run(step, self._transactions) else None

    async def _close_locked(
        self,
        tenant_id: str,
        invocation_id: uuid.UUID,
        values: dict[str, Any],
        summary: InvocationSummary | None,
        started_at: datetime | None = None,
    ) -> bool:
        in_flight = [
            RECEIPTS.c.tenant_id == tenant_id,
            RECEIPTS.c.invocation_id == invocation_id,
            RECEIPTS.c.ended_at.is_(None),
        ]
        if started_at is not None:
            in_flight.append(RECEIPTS.c.started_at == started_at)

        async def step(conn: AsyncConnection) -> bool:
            read = sa.select(RECEIPTS).where(*in_flight).with_for_update()
            found = (await conn.execute(read)).mappings().first()
            if found is None:
                return False
            closed = await conn.execute(sa.update(RECEIPTS).where(*in_flight).values(values))
            if closed.rowcount == 0:
                # SQLite renders no FOR UPDATE: another process's close landed between the read
                # and this write. Its events are the receipt's; writing ours beside them said
                # the call ended twice, and the caller was told a close the receipt contradicts.
                return False
            now = datetime.now(UTC)
            receipt = {**found, **values}
            rows = [outbox_row(tenant_id, e, now) for e in events_of(receipt, summary)]
            await conn.execute(sa.insert(OUTBOX), rows)
            return True

        return await self._run(step, self._transactions)
