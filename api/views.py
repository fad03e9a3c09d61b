"""Builds response views from rows."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from api.schemas import CapabilityEvidence, DeploymentView, EvidenceSummary
from store.evidence import current_scores
from store.tables import CapabilityScoreRow, ModelDeploymentRow
from store.views import deployment_record


def evidence_summary(ref: str | None, rows: list[CapabilityScoreRow]) -> EvidenceSummary:
    return EvidenceSummary(
        evidence_ref=ref,
        capabilities={
            r.capability: CapabilityEvidence(
                score=float(r.score) if r.score is not None else None,
                verdict=r.verdict,
                evaluated_at=r.evaluated_at,
                suite_version=r.suite_version,
            )
            for r in rows
        },
    )


async def deployment_views(
    session: AsyncSession, tenant_id: str, rows: list[ModelDeploymentRow]
) -> list[DeploymentView]:
    scores = await current_scores(session, tenant_id, rows)
    return [
        DeploymentView(
            **deployment_record(r).model_dump(),
            evidence=evidence_summary(r.capability_evidence_ref, scores.get(r.deployment_id, [])),
        )
        for r in rows
    ]
