"""CatalogSnapshot: the catalog compiled into in-memory indexes, with a version.

Built once per catalog change (never per decision) from `CatalogData`. Immutable after
construction except for a cache of compiled cohorts, which is a pure function of the snapshot
and the (tenant, profile) key, so filling it lazily changes no answer.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from domain.catalog import (
    CapabilityScore,
    CatalogData,
    CatalogDeployment,
    DeploymentStats,
    PoolState,
)
from domain.cohort import Cohort, CompiledDeployment, lifecycle_exclusion
from domain.enums import ProfileStatus
from domain.policy import CompiledPolicy
from domain.pricing import Pricebook
from domain.profiles import ModelProfile, version_order
from domain.scoring import NEUTRAL, UNKNOWN, history_term, latency_log

Key = tuple[str, str]  # (tenant id, object id)
ProfileKey = tuple[str, str, str]  # (tenant id, profile id, version)


class ProfileNotVisible(ValueError):
    """The profile belongs to another tenant and is not shared: a caller bug, never routed."""


def _unique(items: Iterable[Any], key: Any, what: str) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for item in items:
        k = key(item)
        if k in out:
            raise ValueError(f"catalog snapshot: duplicate {what} {k!r}")
        out[k] = item
    return out


def _latest(a: CapabilityScore, b: CapabilityScore) -> CapabilityScore:
    """The newer of two scores for one capability; the key is total so input order is moot."""

    def rank(s: CapabilityScore) -> tuple[Any, ...]:
        return (s.evaluated_at, s.suite_version, s.passed, s.measured, s.verdict)

    return a if rank(a) >= rank(b) else b


class CatalogSnapshot:
    __slots__ = (
        "_cohorts",
        "_deployments",
        "_policies",
        "_pricebooks",
        "_profiles",
        "_shared",
        "_unreadable",
        "current_pricebook",
        "data",
        "version",
    )

    def __init__(self, data: CatalogData) -> None:
        self.data = data
        self.version = data.version
        self._shared: tuple[str, ...] = tuple(sorted(data.shared_tenant_ids))
        self._unreadable = frozenset(data.unreadable_profiles)
        self._pricebooks: dict[str, Pricebook] = _unique(
            data.pricebooks, lambda p: p.revision, "pricebook revision"
        )
        current = data.current_pricing_revision
        # A catalog built without naming one (a test's, say): a tenant's only revision is its
        # current one; with several, the builder says which (store/pricebook.current).
        if current is None and len(self._pricebooks) == 1:
            current = next(iter(self._pricebooks))
        if current is not None and current not in self._pricebooks:
            raise ValueError(f"catalog snapshot: current pricing revision {current!r} not given")
        self.current_pricebook = self._pricebooks.get(current) if current else None
        self._policies: dict[str, CompiledPolicy] = {
            t: p.compile()
            for t, p in _unique(data.tenant_policies, lambda p: p.tenant_id, "policy").items()
        }
        pools: dict[str, PoolState] = {
            p.pool_id: p.state for p in _unique(data.pools, lambda p: p.pool_id, "pool").values()
        }
        stats: dict[Key, DeploymentStats] = _unique(
            data.stats, lambda s: (s.tenant_id, s.deployment_id), "stats for"
        )
        scores: dict[Key, dict[str, CapabilityScore]] = {}
        for s in data.capability_scores:
            caps = scores.setdefault((s.tenant_id, s.deployment_id), {})
            prev = caps.get(s.capability)
            caps[s.capability] = s if prev is None else _latest(prev, s)
        deployments: dict[Key, CatalogDeployment] = _unique(
            data.deployments, lambda d: (d.tenant_id, d.deployment_id), "deployment"
        )
        self._deployments: dict[Key, CompiledDeployment] = {
            k: self._compile_deployment(d, scores.get(k, {}), stats.get(k), pools)
            for k, d in deployments.items()
        }
        # Deep copies: cached cohorts are keyed on these objects, so nobody else may mutate them.
        self._profiles: dict[ProfileKey, ModelProfile] = _unique(
            (p.model_copy(deep=True) for p in data.profiles),
            lambda p: (p.tenant_id, p.profile_id, p.version),
            "profile",
        )
        self._cohorts: dict[tuple[str, ProfileKey], Cohort] = {}
        for key, profile in self._profiles.items():
            if profile.status is ProfileStatus.ACTIVE:
                self.cohort(key[0], profile)

    @classmethod
    def build(cls, *, version: int, **values: Any) -> CatalogSnapshot:
        """From plain values (models or dicts), e.g. `build(version=3, deployments=[...])`."""
        return cls(CatalogData.model_validate({"version": version, **values}))

    @staticmethod
    def _compile_deployment(
        d: CatalogDeployment,
        caps: dict[str, CapabilityScore],
        stats: DeploymentStats | None,
        pools: dict[str, PoolState],
    ) -> CompiledDeployment:
        lat = UNKNOWN
        hist = NEUTRAL
        if stats is not None:
            if stats.latency_samples > 0 and stats.latency_p95_ms is not None:
                lat = latency_log(stats.latency_p95_ms)
            hist = history_term(stats.attempts, stats.successes)
        pool = pools.get(d.compute_pool_id) if d.compute_pool_id else None
        return CompiledDeployment(d, caps, lat, hist, lifecycle_exclusion(d, pool))

    # -- lookups, all scoped to the asking tenant ---------------------------------------------

    def visible_tenants(self, tenant_id: str) -> tuple[str, ...]:
        """Whose catalog a tenant sees, in precedence order: its own, then the shared ones."""
        return (tenant_id, *(t for t in self._shared if t != tenant_id))

    def _compiled(self, tenant_id: str, deployment_id: str) -> CompiledDeployment | None:
        for owner in self.visible_tenants(tenant_id):
            found = self._deployments.get((owner, deployment_id))
            if found is not None:
                return found
        return None

    def deployment(self, tenant_id: str, deployment_id: str) -> CatalogDeployment | None:
        found = self._compiled(tenant_id, deployment_id)
        return found.record if found else None

    def capability(
        self, tenant_id: str, deployment_id: str, capability: str
    ) -> CapabilityScore | None:
        found = self._compiled(tenant_id, deployment_id)
        return found.capabilities.get(capability) if found else None

    def policy(self, tenant_id: str) -> CompiledPolicy | None:
        return self._policies.get(tenant_id)

    def pricebook(self, revision: str) -> Pricebook | None:
        return self._pricebooks.get(revision)

    def pricebook_for(self, profile: ModelProfile) -> Pricebook | None:
        """The revision the profile's priceBasis names, else the tenant's current one (the one
        it published last): the decision records which revision it used, so a stale priceBasis
        is visible, not fatal."""
        return self._pricebooks.get(profile.price_basis) or self.current_pricebook

    def profile(
        self, tenant_id: str, profile_id: str, version: str | None = None
    ) -> ModelProfile | None:
        """An exact version, or (version None) the highest Active version the tenant sees.
        The snapshot's own object: pass it to plan_route as is (its compiled cohort is found by
        identity) and never mutate it."""
        for owner in self.visible_tenants(tenant_id):
            if version is not None:
                found = self._profiles.get((owner, profile_id, version))
                if found is not None:
                    return found
                continue
            active = [
                p
                for (t, pid, _), p in self._profiles.items()
                if t == owner and pid == profile_id and p.status is ProfileStatus.ACTIVE
            ]
            if active:
                return max(active, key=lambda p: version_order(p.version))
        return None

    def unreadable(self, tenant_id: str, profile_id: str) -> bool:
        """Whether a stored version of the profile, as the tenant sees it, does not read (the
        catalog left it out whole: CatalogData.unreadable_profiles)."""
        return any(
            (owner, profile_id) in self._unreadable for owner in self.visible_tenants(tenant_id)
        )

    def profile_visible(self, tenant_id: str, profile: ModelProfile) -> bool:
        return profile.tenant_id == tenant_id or profile.tenant_id in self._shared

    def cohort(self, tenant_id: str, profile: ModelProfile) -> Cohort:
        """The compiled (tenant, profile) pair; cached when the profile is this snapshot's own."""
        if not self.profile_visible(tenant_id, profile):
            raise ProfileNotVisible(
                f"profile {profile.profile_id} is not visible to tenant {tenant_id}"
            )
        pkey = (profile.tenant_id, profile.profile_id, profile.version)
        own = self._profiles.get(pkey)
        if own is None or (own is not profile and own != profile):
            # A profile from outside the snapshot (a preview of a draft, say): compile afresh.
            return self._new_cohort(tenant_id, profile)
        cached = self._cohorts.get((tenant_id, pkey))
        if cached is None:
            cached = self._cohorts[(tenant_id, pkey)] = self._new_cohort(tenant_id, own)
        return cached

    def _new_cohort(self, tenant_id: str, profile: ModelProfile) -> Cohort:
        return Cohort(
            profile, lambda dep_id: self._compiled(tenant_id, dep_id), self.pricebook_for(profile)
        )
