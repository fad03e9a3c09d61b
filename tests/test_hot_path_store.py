"""The invoke path's statements on a pool without pre-ping, against a real PostgreSQL restart:
a connection that dropped is retried once on a fresh one (the call goes on), a store that is
gone surfaces at once as an error the API answers with a 503 — and each step is one statement."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import pytest
from sqlalchemy import select
from sqlalchemy.exc import DBAPIError
from sqlmodel import col

from bench.local_postgres import LocalPostgres
from domain.enums import InvocationOutcome, UsageStatus
from domain.invocation import InvocationInput, InvocationSummary, Target, invocation_id
from store.db import create_engine, session_factory
from store.receipt_statements import ReceiptStatements
from store.tables import InvocationReceiptRow, OutboxEventRow
from tests.test_fault_postgres import own_postgres

__all__ = ["own_postgres"]  # the fixture, shared with the stop/start test


def _input(tenant: str) -> InvocationInput:
    key = f"hot-{uuid.uuid4().hex}"
    return InvocationInput(
        invocation_id=invocation_id(tenant, key),
        tenant_id=tenant,
        project_id="p",
        profile_id="chat",
        policy_decision_id=uuid.uuid4(),
        idempotency_key=key,
        request_hash="sha256:x",
        pricing_revision="none",
        caller_token="",
        caller_queue="q",
        timeout_seconds=30,
        targets=[Target(deployment_id="sim/a", provider="openai", model="m", endpoint_ref="x")],
    )


def _done(data: InvocationInput) -> InvocationSummary:
    return InvocationSummary(
        invocation_id=data.invocation_id,
        outcome=InvocationOutcome.COMPLETED,
        usage_status=UsageStatus.REPORTED,
        deployment_id="sim/a",
        input_tokens=3,
        output_tokens=4,
        latency_ms=5,
    )


async def test_a_postgres_restart_costs_the_hot_path_one_retry_and_an_outage_a_clear_error(
    own_postgres: tuple[LocalPostgres, str],
) -> None:
    pg, url = own_postgres
    engine = create_engine(url, pool_size=4, pre_ping=False)
    statements = ReceiptStatements(engine)
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    try:
        # Fill the pool: every one of these connections dies with the restart.
        warm = [_input(tenant) for _ in range(4)]
        assert all(await asyncio.gather(*(statements.claim(d, "sim/a") for d in warm)))
        await asyncio.to_thread(pg.stop, "fast")
        await asyncio.to_thread(pg.restart)

        # After the restart: each step goes through (its dead connection retried once).
        after = [_input(tenant) for _ in range(4)]
        assert all(await asyncio.gather(*(statements.claim(d, "sim/a") for d in after)))
        assert await statements.catalog_version() >= 0
        assert all(
            await asyncio.gather(*(statements.finalize(d, _done(d)) for d in [*warm, *after]))
        )
        # A used key is told by the claim itself; a second close changes nothing.
        assert await statements.claim(after[0], "sim/a") is False
        assert await statements.finalize(after[0], _done(after[0])) is False

        async with session_factory(engine)() as session:
            rows = (
                await session.scalars(
                    select(InvocationReceiptRow).where(
                        col(InvocationReceiptRow.tenant_id) == tenant
                    )
                )
            ).all()
            events = (
                await session.scalars(
                    select(OutboxEventRow).where(col(OutboxEventRow.tenant_id) == tenant)
                )
            ).all()
        assert len(rows) == 8 and all(r.ended_at is not None for r in rows)
        assert all(r.outcome is InvocationOutcome.COMPLETED for r in rows)
        assert sorted(e.aggregate_id for e in events) == sorted(str(r.invocation_id) for r in rows)
        assert {e.event_type for e in events} == {"ModelInvoked"}

        # The store gone: the claim fails promptly (no hang), nothing written.
        await asyncio.to_thread(pg.stop, "fast")
        started = datetime.now(UTC)
        with pytest.raises((DBAPIError, OSError)):
            await statements.claim(_input(tenant), "sim/a")
        assert (datetime.now(UTC) - started).total_seconds() < 30
    finally:
        await engine.dispose()
