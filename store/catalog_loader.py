"""Reads what one tenant's routing decisions depend on into the planner's plain values."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime

from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col, select

from domain.catalog import CatalogData, CatalogDeployment, DeploymentStats
from domain.enums import ProfileStatus
from domain.policy import TenantPolicy, baseline_policy
from domain.pricing import Pricebook
from domain.profiles import ModelProfile
from domain.scoring import DEFAULT_WEIGHTS, Weights
from store import pricebook
from store.evidence import capability_score, current_scores
from store.probes import probe_latency
from store.routing_tables import CatalogStateRow, TenantPolicyRow, TenantRoutingWeightsRow
from store.tables import ModelDeploymentRow, ModelProfileRow

log = logging.getLogger(__name__)


async def load_weights(session: AsyncSession, tenant_id: str) -> tuple[int, Weights]:
    """The catalog version and the tenant's weights: its own, else the platform-wide ones set
    before weights were a tenant's, else the defaults. One statement, so the version and the
    weights are read together (a snapshot keeps both)."""
    own = TenantRoutingWeightsRow
    stmt = (
        select(CatalogStateRow.version, CatalogStateRow.weights, own.weights)
        .select_from(CatalogStateRow)
        .outerjoin(own, col(own.tenant_id) == tenant_id)
        .where(col(CatalogStateRow.id) == 1)
    )
    row = (await session.execute(stmt)).first()
    if row is None:
        return 0, DEFAULT_WEIGHTS
    version, platform, tenant = row
    chosen = tenant or platform
    return version, Weights.from_config(chosen) if chosen else DEFAULT_WEIGHTS


async def load_policy(session: AsyncSession, tenant_id: str) -> TenantPolicy:
    row = await session.get(TenantPolicyRow, tenant_id)
    if row is None:
        # A tenant that wrote no policy gets the conservative baseline (documented), not none.
        return baseline_policy(tenant_id)
    return TenantPolicy.model_validate(
        {**row.document, "tenantId": tenant_id, "revision": row.revision}
    )


async def load_stats(
    session: AsyncSession, tenant_id: str, deployment_ids: list[str], since: datetime
) -> tuple[DeploymentStats, ...]:
    """The deployments' probe statistics since `since`: one statement."""
    if not deployment_ids:
        return ()
    measured = await probe_latency(
        session, since=since, tenant_id=tenant_id, deployment_ids=deployment_ids
    )
    return tuple(m.routing_stats() for m in measured.values())


async def load_catalog(
    session: AsyncSession, tenant_id: str, version: int, *, stats_since: datetime | None = None
) -> CatalogData:
    """The tenant's catalog at `version`, and its deployments' probe statistics since
    `stats_since` (none when None): what routing's latency and history terms score."""
    deployments = (
        await session.scalars(
            select(ModelDeploymentRow).where(col(ModelDeploymentRow.tenant_id) == tenant_id)
        )
    ).all()
    stats: tuple[DeploymentStats, ...] = ()
    if stats_since is not None:
        ids = [d.deployment_id for d in deployments]
        stats = await load_stats(session, tenant_id, ids, stats_since)
    profiles = (
        await session.scalars(
            select(ModelProfileRow).where(col(ModelProfileRow.tenant_id) == tenant_id)
        )
    ).all()
    routed, unreadable = _readable(p for p in profiles if p.status in _ROUTED)
    scores = await current_scores(session, tenant_id, deployments)
    # What a profile whose priceBasis names no published revision is priced at, by routing,
    # admission and the receipt alike. Read before the revisions: every revision is read after
    # its rows committed, so the current one is among them (read after, a revision published
    # in between was current but not loaded, and the snapshot could not be built).
    current = await pricebook.current(session, tenant_id)
    books: list[Pricebook] = []
    for revision in await pricebook.revisions(session, tenant_id):
        book = await pricebook.load(session, tenant_id, revision)
        if book is not None:
            books.append(book)
    return CatalogData(
        version=version,
        deployments=tuple(
            CatalogDeployment(
                deployment_id=d.deployment_id,
                tenant_id=d.tenant_id,
                provider=d.provider,
                model=d.model,
                region=d.region,
                privacy_class=d.privacy_class,
                state=d.state,
                healthy=d.healthy,
                version=d.version,
                compute_pool_id=d.compute_pool_id,
                context_window_tokens=d.context_window_tokens,
                endpoint_ref=d.endpoint_ref,
            )
            for d in deployments
        ),
        capability_scores=tuple(
            capability_score(tenant_id, s) for rows in scores.values() for s in rows
        ),
        stats=stats,
        pricebooks=tuple(books),
        current_pricing_revision=current,
        tenant_policies=(await load_policy(session, tenant_id),),
        profiles=routed,
        unreadable_profiles=unreadable,
    )


_ROUTED = (ProfileStatus.ACTIVE, ProfileStatus.RETIRED)


def _readable(
    rows: Iterable[ModelProfileRow],
) -> tuple[tuple[ModelProfile, ...], tuple[tuple[str, str], ...]]:
    """The profiles whose every routed version reads as this version reads them, and the
    (tenant, profile) of the others. A profile with a version that does not (written before a
    rule was tightened, or by hand) is left out whole, with a warning naming the version: it
    routes nothing until the row is corrected, a refusal saying so (routing/refusals
    ProfileUnreadable), as its REST read does. Read regardless, its ValidationError failed the
    tenant's whole snapshot, every call of every profile of the tenant; left out alone, new runs
    took its older version, whatever the newer one had tightened."""
    readable: dict[tuple[str, str], list[ModelProfile]] = {}
    unreadable: set[tuple[str, str]] = set()
    for row in rows:
        key = (row.tenant_id, row.profile_id)
        try:
            readable.setdefault(key, []).append(ModelProfile.model_validate(row))
        except ValidationError:
            unreadable.add(key)
            log.warning(
                "profile %s version %s of tenant %s does not read: the profile is left out of "
                "routing",
                row.profile_id,
                row.version,
                row.tenant_id,
            )
    profiles = tuple(
        p for key, versions in readable.items() if key not in unreadable for p in versions
    )
    return profiles, tuple(sorted(unreadable))
