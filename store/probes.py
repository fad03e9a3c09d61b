"""Health-probe storage: which deployments to probe, one sample per deployment and window, and
the latency statistics a catalog snapshot builder reads.

The probe is a platform job, not a tenant's request, so `probe_targets` reads across tenants;
everything it returns is keyed by (tenant, deployment) and written back under that tenant.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import delete
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col, select

from domain.enums import Modality, ProfileStatus
from domain.health import (
    PROBED_STATES,
    LatencyStats,
    ProbeOutcome,
    ProbeResult,
    ProbeTarget,
    latency_stats,
)
from store.columns import utcnow
from store.ops_tables import ProbeSampleRow
from store.tables import ModelDeploymentRow, ModelProfileRow
from store.upsert import upsert


async def probe_targets(
    session: AsyncSession, tenant_ids: Sequence[str] | None = None
) -> list[ProbeTarget]:
    stmt = select(ModelDeploymentRow).where(col(ModelDeploymentRow.state).in_(PROBED_STATES))
    if tenant_ids is not None:
        stmt = stmt.where(col(ModelDeploymentRow.tenant_id).in_(list(tenant_ids)))
    rows = (await session.scalars(stmt)).all()
    modality = await _modalities(session, {r.tenant_id for r in rows})
    return sorted(
        (
            ProbeTarget(
                tenant_id=r.tenant_id,
                deployment_id=r.deployment_id,
                provider=r.provider,
                model=r.model,
                endpoint_ref=r.endpoint_ref,
                state=r.state,
                modality=modality.get((r.tenant_id, r.deployment_id), Modality.CHAT),
            )
            for r in rows
        ),
        key=lambda t: (t.tenant_id, t.deployment_id),
    )


async def _modalities(session: AsyncSession, tenants: set[str]) -> dict[tuple[str, str], Modality]:
    """A deployment is probed the way the profiles that list it use it (an embedding model
    cannot answer a chat request): its Active profiles' modality, and with none Active, that of
    the newest version of any status listing it. Read from Active ones alone, an embedding
    deployment whose profiles were all retired got a chat request, failed it as not a chat
    model, went Degraded and never recovered: every probe failed the same way. A retired
    version still says what the deployment is for, and the newest says it last. Deployments no
    version lists get a chat request (a reranker's adapter asks a rerank, activities/probes.py)."""
    if not tenants:
        return {}
    stmt = select(ModelProfileRow).where(col(ModelProfileRow.tenant_id).in_(sorted(tenants)))
    profiles = sorted(
        (await session.scalars(stmt)).all(),
        # Active ones first, in the order they were always read; then the rest, newest first
        # (ids grow as versions are published).
        key=lambda p: (
            (0, 0, p.profile_id, p.version)
            if p.status is ProfileStatus.ACTIVE
            else (1, -(p.id or 0), "", "")
        ),
    )
    found: dict[tuple[str, str], Modality] = {}
    for profile in profiles:
        for deployment_id in profile.allowed_deployments or []:
            found.setdefault((profile.tenant_id, deployment_id), profile.modality)
    return found


async def find_sample(
    session: AsyncSession, tenant_id: str, deployment_id: str, window_start: datetime
) -> ProbeSampleRow | None:
    stmt = (
        select(ProbeSampleRow)
        .where(col(ProbeSampleRow.tenant_id) == tenant_id)
        .where(col(ProbeSampleRow.deployment_id) == deployment_id)
        .where(col(ProbeSampleRow.window_start) == window_start)
    )
    return (await session.scalars(stmt)).first()


async def record_sample(
    session: AsyncSession, result: ProbeResult, window_start: datetime, attempt: int
) -> None:
    """One sample per window; a later attempt in the same window replaces an earlier one."""
    await upsert(
        session,
        ProbeSampleRow,
        [
            {
                "tenant_id": result.tenant_id,
                "deployment_id": result.deployment_id,
                "window_start": window_start,
                "probed_at": utcnow(),
                "outcome": result.outcome.value,
                "latency_ms": result.latency_ms,
                "error_class": result.error_class,
                "attempt": attempt,
            }
        ],
        conflict=("tenant_id", "deployment_id", "window_start"),
        update=("probed_at", "outcome", "latency_ms", "error_class", "attempt"),
    )


async def prune_samples(session: AsyncSession, older_than: datetime) -> int:
    result = await session.execute(
        delete(ProbeSampleRow).where(col(ProbeSampleRow.window_start) < older_than)
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


async def probe_latency(
    session: AsyncSession,
    *,
    since: datetime,
    tenant_id: str | None = None,
    deployment_ids: Sequence[str] | None = None,
) -> dict[tuple[str, str], LatencyStats]:
    """p50/p95 of successful probes and sample counts per (tenant, deployment) since `since`:
    the latency statistics of a catalog snapshot. Naming the deployments lets the window's
    unique index serve the read (tenant, deployment, window) rather than every sample the
    tenant's retention keeps (72 hours of them by default)."""
    stmt = select(
        ProbeSampleRow.tenant_id,
        ProbeSampleRow.deployment_id,
        ProbeSampleRow.outcome,
        ProbeSampleRow.latency_ms,
    ).where(col(ProbeSampleRow.window_start) >= since)
    if tenant_id is not None:
        stmt = stmt.where(col(ProbeSampleRow.tenant_id) == tenant_id)
    if deployment_ids is not None:
        stmt = stmt.where(col(ProbeSampleRow.deployment_id).in_(list(deployment_ids)))
    samples: dict[tuple[str, str], list[tuple[ProbeOutcome, int | None]]] = defaultdict(list)
    for tenant, deployment, outcome, latency in (await session.execute(stmt)).all():
        samples[(tenant, deployment)].append((ProbeOutcome(outcome), latency))
    return {key: latency_stats(key[0], key[1], values) for key, values in samples.items()}
