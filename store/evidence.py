"""Read-side: the current capability evidence of deployments, by evidence reference."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col, select

from domain.catalog import CapabilityScore
from store.tables import CapabilityScoreRow, ModelDeploymentRow


def capability_score(tenant_id: str, row: CapabilityScoreRow) -> CapabilityScore:
    """A score row as the domain reads it (the planner's thresholds, `CapabilityScore.meets`)."""
    return CapabilityScore(
        tenant_id=tenant_id,
        deployment_id=row.deployment_id,
        capability=row.capability,
        verdict=row.verdict,
        score=float(row.score) if row.score is not None else None,
        evaluated_at=row.evaluated_at,
        suite_version=row.suite_version,
    )


async def current_scores(
    session: AsyncSession, tenant_id: str, deployments: Iterable[ModelDeploymentRow]
) -> dict[str, list[CapabilityScoreRow]]:
    """deploymentId → score rows of its current evaluation record (one query for all)."""
    refs = {d.deployment_id: d.capability_evidence_ref for d in deployments}
    wanted = {r for r in refs.values() if r}
    if not wanted:
        return {}
    stmt = (
        select(CapabilityScoreRow)
        .where(col(CapabilityScoreRow.tenant_id) == tenant_id)
        .where(col(CapabilityScoreRow.evidence_ref).in_(wanted))
        .order_by(col(CapabilityScoreRow.capability))
    )
    out: dict[str, list[CapabilityScoreRow]] = defaultdict(list)
    for row in (await session.scalars(stmt)).all():
        if refs.get(row.deployment_id) == row.evidence_ref:
            out[row.deployment_id].append(row)
    return out
