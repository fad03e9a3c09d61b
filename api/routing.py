"""Routing in the API process: a per-tenant catalog snapshot, rebuilt only when the catalog
version moved, and the pure planner deciding against it with no I/O."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api.problems import Problem
from domain.planner import PlanRequest, plan_route
from domain.profiles import ModelProfile
from domain.route_plan import RoutePlanResult
from domain.scoring import Weights
from domain.snapshot import CatalogSnapshot
from store.catalog_loader import load_catalog, load_weights
from store.repositories import ModelProfileRepository


class SnapshotCache:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions
        self._cache: dict[str, tuple[CatalogSnapshot, Weights]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def snapshot(self, tenant_id: str) -> tuple[CatalogSnapshot, Weights]:
        """One small read of the catalog version; the catalog itself is read only when that
        version moved since this tenant's snapshot was compiled."""
        async with self._sessions() as session:
            version, _ = await load_weights(session)
        cached = self._cache.get(tenant_id)
        if cached is not None and cached[0].version == version:
            return cached
        lock = self._locks.setdefault(tenant_id, asyncio.Lock())
        async with lock:
            cached = self._cache.get(tenant_id)
            if cached is not None and cached[0].version >= version:
                return cached
            async with self._sessions() as session:
                version, weights = await load_weights(session)
                data = await load_catalog(session, tenant_id, version)
            built = (CatalogSnapshot(data), weights)
            self._cache[tenant_id] = built
            return built


async def current_profile(
    sessions: async_sessionmaker[AsyncSession], tenant_id: str, profile_id: str
) -> ModelProfile:
    async with sessions() as session:
        rows = await ModelProfileRepository(session, tenant_id).latest_active()
    row = next((r for r in rows if r.profile_id == profile_id), None)
    if row is None:
        raise Problem(404, f"No active profile {profile_id!r}.", field="profileId")
    return ModelProfile.model_validate(row)


async def decide(
    cache: SnapshotCache, profile: ModelProfile, request: PlanRequest
) -> RoutePlanResult:
    snapshot, weights = await cache.snapshot(request.tenant_id)
    # Deciding is pure: from here on, no I/O until the plan is returned.
    decision = plan_route(snapshot, profile, request, now=datetime.now(UTC), weights=weights)
    return decision.to_result()
