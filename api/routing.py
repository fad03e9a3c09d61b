"""Routing in the API process: a per-tenant catalog snapshot, rebuilt only when the catalog
version moved, and the pure planner deciding against it with no I/O."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api.problems import Problem
from domain.exclusions import ExclusionCode
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


async def pinned_profile(
    sessions: async_sessionmaker[AsyncSession], tenant_id: str, profile_id: str, version: str
) -> ModelProfile:
    """The version a run's plan was resolved under, whatever its status now: versions are
    immutable and kept, so a run keeps the fallback rules and price basis it started with even
    after that version is retired or superseded."""
    async with sessions() as session:
        row = await ModelProfileRepository(session, tenant_id).get_version(profile_id, version)
    if row is None:
        # Versions are never deleted: a plan naming a missing one is a broken store.
        raise LookupError(f"route plan names profile {profile_id} version {version}, not stored")
    return ModelProfile.model_validate(row)


async def decide(
    cache: SnapshotCache, profile: ModelProfile, request: PlanRequest
) -> RoutePlanResult:
    snapshot, weights = await cache.snapshot(request.tenant_id)
    # Deciding is pure: from here on, no I/O until the plan is returned.
    decision = plan_route(snapshot, profile, request, now=datetime.now(UTC), weights=weights)
    return decision.to_result()


_C = ExclusionCode
# The tenant policy's refusals (step 5 in domain.exclusions).
_POLICY = frozenset(
    {
        _C.NO_TENANT_POLICY,
        _C.PRIVACY_DENIED_BY_POLICY,
        _C.CONFIDENTIAL_TO_EXTERNAL,
        _C.PROVIDER_DENIED,
        _C.REGION_DENIED_BY_POLICY,
    }
)
# Refusals that lift without anyone acting (a probe recovers, a pool comes back): while one of
# these also keeps a candidate out, an empty plan is a transient failure, not a denial.
_SELF_CLEARING = frozenset({_C.UNHEALTHY, _C.POOL_DRAINING, _C.POOL_OFFLINE})
# Refusals about the data the caller declared, rather than the profile's deployments.
_DATA_CLASS = frozenset({_C.PRIVACY_DENIED_BY_POLICY, _C.CONFIDENTIAL_TO_EXTERNAL})


def none_available(profile_id: str, retry_after: int) -> Problem:
    """Every candidate is Degraded, unhealthy or out of its pool: transient, worth a retry."""
    return Problem(
        503,
        f"No candidate of profile {profile_id!r} is available "
        "(none approved and healthy under this plan).",
        headers={"Retry-After": str(retry_after)},
        errorClass="transient",
    )


def unhealthy_ids(plan: RoutePlanResult) -> list[str]:
    # Health is the first filter, so one may fail another too: then the caller merely comes
    # back early.
    return [e.deployment_id for e in plan.excluded if e.code is ExclusionCode.UNHEALTHY]


def policy_denial(plan: RoutePlanResult) -> Problem | None:
    """A 403 when the tenant policy is what left the plan without a candidate. Retrying cannot
    help until the caller changes the data classification or an operator the policy, so it is
    not the transient "no candidate available" answer; None when that answer is the right one."""
    if plan.candidates:
        return None
    refused = [e for e in plan.excluded if e.code in _POLICY]
    if not refused or any(e.code in _SELF_CLEARING for e in plan.excluded):
        return None
    reason = refused[0].code.value  # the profile's most preferred deployment's refusal
    dc = plan.constraints.data_classification.value
    why = "; ".join(f"{e.deployment_id}: {e.reason}" for e in refused)
    return Problem(
        403,
        f"Denied by tenant policy (revision {plan.policy_revision}): no deployment of profile "
        f"{plan.profile_id!r} may take {dc} data ({why}).",
        type_="https://model-router.dev/problems/policy-denied",
        field="dataClassification" if refused[0].code in _DATA_CLASS else "profileId",
        reason=reason,
        errorClass="permanent",
        policyRevision=plan.policy_revision,
        policyDecisionId=str(plan.policy_decision_id),
        excluded=[
            {"deploymentId": e.deployment_id, "code": e.code.value, "reason": e.reason}
            for e in plan.excluded
        ],
    )
