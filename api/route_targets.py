"""The invocation's targets: the pinned plan's routable candidates in route order, then, when
the profile enables fallback, the routable candidates of its fallback chain's profiles that
satisfy the same plan constraints (so a fallback never weakens privacy, region, tools,
structured output, context or capability guarantees)."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col, select

from api.problems import Problem
from api.routing import SnapshotCache, current_profile, decide
from domain.constraints import satisfies_constraints
from domain.enums import PrivacyClass
from domain.invocation import Target
from domain.lifecycle import is_routable
from domain.planner import PlanRequest
from domain.profiles import ModelProfile
from domain.route_plan import PlanConstraints
from store.tables import ModelDeploymentRow


async def routable_targets(
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    candidates: list[str],
    embedding_compatibility: str | None,
) -> list[Target]:
    async with sessions() as session:
        rows = {
            r.deployment_id: r
            for r in (
                await session.scalars(
                    select(ModelDeploymentRow)
                    .where(col(ModelDeploymentRow.tenant_id) == tenant)
                    .where(col(ModelDeploymentRow.deployment_id).in_(candidates))
                )
            ).all()
        }
    # Degraded or unhealthy candidates are skipped; the plan itself never changes.
    return [
        Target(
            deployment_id=d,
            provider=r.provider,
            model=r.model,
            endpoint_ref=r.endpoint_ref,
            privacy_class=r.privacy_class.value,
            external=r.privacy_class is PrivacyClass.EXTERNAL,
            context_window_tokens=r.context_window_tokens,
            embedding_compatibility=embedding_compatibility,
        )
        for d in candidates
        if (r := rows.get(d)) is not None and is_routable(r.state, r.healthy)
    ]


async def chain_targets(
    sessions: async_sessionmaker[AsyncSession],
    snapshots: SnapshotCache,
    profile: ModelProfile,
    needs: PlanRequest,
    constraints: PlanConstraints,
    have: set[str],
) -> list[Target]:
    if not profile.fallback_enabled:
        return []
    tenant = needs.tenant_id
    snapshot, _ = await snapshots.snapshot(tenant)
    out: list[Target] = []
    for fallback_id in profile.fallback_chain:
        try:
            other = await current_profile(sessions, tenant, fallback_id)
            plan = await decide(snapshots, other, needs)
        except Problem:
            continue  # a retired or unplannable fallback profile offers nothing
        if other.embedding_compatibility != profile.embedding_compatibility:
            continue
        ids = [
            d
            for d in plan.candidate_ids
            if d not in have and satisfies_constraints(snapshot, tenant, d, constraints)
        ]
        have.update(ids)
        out += await routable_targets(sessions, tenant, ids, other.embedding_compatibility)
    return out
