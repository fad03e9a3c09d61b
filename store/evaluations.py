"""Writes of evaluation runs: the Running row a start inserts (one per key), and the outcome
the run ends with (Completed with its evidence and summary, or Failed with why)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, literal, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from store.tables import EvaluationRow


async def lock_deployment(session: AsyncSession, tenant_id: str, deployment_id: str) -> None:
    """Hold the deployment's evaluation lock to the end of the transaction (PostgreSQL), so a
    start that looks for a running evaluation and inserts its own is one at a time per
    deployment: two keys at the same moment each found none running and both ran the suite,
    billed twice. Two deployments whose keys hash alike only wait for each other's start.
    SQLite, a development store, takes no lock (as webhook subscriptions' `active_count`)."""
    if session.get_bind().dialect.name == "postgresql":
        key = literal(f"evaluations:{tenant_id}/{deployment_id}")
        await session.execute(select(func.pg_advisory_xact_lock(func.hashtextextended(key, 0))))


async def insert_running(
    session: AsyncSession, evaluation_id: str, tenant_id: str, deployment_id: str, suite: str
) -> bool:
    """Insert the run's row unless this id has one (the same key again); whether it did."""
    if await session.get(EvaluationRow, evaluation_id) is not None:
        return False
    session.add(
        EvaluationRow(
            evaluation_id=evaluation_id,
            tenant_id=tenant_id,
            deployment_id=deployment_id,
            suite_version=suite,
            status="Running",
        )
    )
    return True


def reopen(row: EvaluationRow) -> None:
    """A row settled as never started, Running again as its key starts its run after all."""
    row.status, row.reason, row.ended_at = "Running", None, None
    row.started_at = datetime.now(UTC)


async def running(
    session: AsyncSession, tenant_id: str, deployment_id: str
) -> EvaluationRow | None:
    """The deployment's newest evaluation still Running, if any."""
    stmt = (
        select(EvaluationRow)
        .where(col(EvaluationRow.tenant_id) == tenant_id)
        .where(col(EvaluationRow.deployment_id) == deployment_id)
        .where(col(EvaluationRow.status) == "Running")
        .order_by(col(EvaluationRow.started_at).desc())
    )
    return (await session.scalars(stmt)).first()


async def complete(
    session: AsyncSession,
    evaluation_id: str,
    evidence_ref: str,
    summary: dict[str, Any],
    suite_version: str,
) -> None:
    """Completed with its evidence, its summary and the suite version the record was made
    with: the row was inserted with the API process's version, which a rolling deploy that
    bumps the suite leaves behind the worker's (the row said N+1, its scores and their
    CapabilityEvidenceRecorded N)."""
    row = await session.get(EvaluationRow, evaluation_id)
    if row is not None:
        row.status, row.evidence_ref, row.ended_at = "Completed", evidence_ref, datetime.now(UTC)
        row.summary, row.suite_version = summary, suite_version


async def fail(session: AsyncSession, tenant_id: str, evaluation_id: str, reason: str) -> None:
    """Failed with why, only a row still Running: a failure never turns an outcome already
    recorded (Completed, its evidence imported: the deployment Evaluated on it) into Failed,
    whichever run under the id reports it last. One conditional statement, as `settle`. The
    reason names an error class or a refusal, never content; bounded for the column."""
    await session.execute(
        update(EvaluationRow)
        .where(col(EvaluationRow.evaluation_id) == evaluation_id)
        .where(col(EvaluationRow.tenant_id) == tenant_id)
        .where(col(EvaluationRow.status) == "Running")
        .values(status="Failed", reason=reason[:500], ended_at=datetime.now(UTC))
        .execution_options(synchronize_session=False)
    )


async def settle(
    session: AsyncSession, tenant_id: str, evaluation_id: str, evidence_ref: str | None, reason: str
) -> None:
    """End a row still Running whose run ended unheard (api/evaluations.py): Completed with
    the run's evidence and no summary, or Failed with why. One conditional statement, on both
    engines: a reader that read the row Running never overwrites the outcome its run recorded
    since, summary and reason included."""
    values: dict[str, Any] = (
        {"status": "Completed", "evidence_ref": evidence_ref, "summary": {}}
        if evidence_ref
        else {"status": "Failed", "reason": reason[:500]}
    )
    await session.execute(
        update(EvaluationRow)
        .where(col(EvaluationRow.evaluation_id) == evaluation_id)
        .where(col(EvaluationRow.tenant_id) == tenant_id)
        .where(col(EvaluationRow.status) == "Running")
        .values(**values, ended_at=datetime.now(UTC))
        .execution_options(synchronize_session=False)
    )
