"""The catalog routing decides against: a per-tenant snapshot, rebuilt only when the catalog
version moved, and the pure planner deciding against it with no I/O."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from domain.catalog import CatalogDeployment, PoolState
from domain.cohort import lifecycle_exclusion
from domain.enums import DeploymentState, Modality, PrivacyClass
from domain.exclusions import ExclusionCode
from domain.fallback import healed, may_stand_in, passed_over
from domain.invocation import Target
from domain.planner import PlanRequest, plan_route
from domain.profiles import ModelProfile
from domain.route_plan import RoutePlanResult
from domain.scoring import Weights
from domain.snapshot import CatalogSnapshot
from routing.refusals import ProfileUnreadable, UnknownProfile, self_clearing
from store.catalog_loader import load_catalog, load_stats, load_weights
from store.receipt_statements import ReceiptStatements

log = logging.getLogger("model_router.routing")

# Tenants whose snapshot a process keeps: past it, those compiled longest ago are forgotten
# (compiled again at their next call). Each holds the tenant's whole catalog, 100-300 KB.
MAX_TENANTS = 2_000

# (tenant, the snapshot replaced or None, the new one): `SnapshotCache.on_version`.
OnVersion = Callable[[str, CatalogSnapshot | None, CatalogSnapshot], None]


@dataclass(frozen=True)
class StatsWindow:
    """The deployments' probe statistics routing scores (latency p95, success rate): measured
    over the last `window`, and compiled into a tenant's snapshot again once it is `refresh`
    seconds old (settings `routing_stats_window_minutes`, `routing_stats_refresh_seconds`)."""

    window: timedelta = timedelta(hours=1)
    refresh: float = 120.0


class SnapshotCache:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        statements: ReceiptStatements,
        stats: StatsWindow | None = None,
    ) -> None:
        self._sessions = sessions
        self._statements = statements
        self._stats = stats or StatsWindow()
        self._cache: dict[str, CatalogView] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._refreshing: dict[str, asyncio.Task[None]] = {}
        # A tenant whose refresh failed is tried again after another refresh period, not at
        # its next call (the store away, each call of each tenant started one).
        self._retry_at: dict[str, float] = {}
        # Told of each tenant's catalog compiled at a new version, with the snapshot it replaces
        # (None: none kept here), once per version and never for a statistics refresh: the
        # invoke side's breakers forget what the catalog has judged since
        # (activities/resilience.py BreakerRegistry.catalog_moved).
        self.on_version: OnVersion | None = None

    def cached(self, tenant_id: str) -> CatalogView | None:
        """The tenant's snapshot as last compiled here, its version not read again: for a route
        whose claim checks that version (routing.routes, `cached`)."""
        found = self._cache.get(tenant_id)
        if found is not None:
            self._refresh_if_old(found)
        return found

    async def view(self, tenant_id: str) -> CatalogView:
        """One small statement for the catalog version (no session, no ping); the catalog
        itself is read only when that version moved since this tenant's snapshot was compiled.
        Every call sees every committed catalog write: no staleness bound to document. The
        probe statistics are the exception: a snapshot serves with them until it is
        `StatsWindow.refresh` old, then is compiled again beside the calls, not before one."""
        version = await self._statements.catalog_version()
        cached = self._cache.get(tenant_id)
        if cached is not None and cached.snapshot.version == version:
            self._refresh_if_old(cached)
            return cached
        lock = self._locks.setdefault(tenant_id, asyncio.Lock())
        async with lock:
            cached = self._cache.get(tenant_id)
            if cached is not None and cached.snapshot.version >= version:
                return cached
            try:
                return await self._build(tenant_id)
            except BaseException:
                if tenant_id not in self._cache:
                    self._locks.pop(tenant_id, None)  # a tenant kept nowhere keeps no lock
                raise

    async def _build(self, tenant_id: str) -> CatalogView:
        """The tenant's catalog at its current version, compiled and kept (under its lock)."""
        compiled_at = time.monotonic()
        since = datetime.now(UTC) - self._stats.window
        async with self._sessions() as session:
            version, weights = await load_weights(session, tenant_id)
            data = await load_catalog(session, tenant_id, version, stats_since=since)
        return self._keep(CatalogView(tenant_id, CatalogSnapshot(data), weights, compiled_at))

    def _keep(self, view: CatalogView) -> CatalogView:
        """Keep `view` as its tenant's newest, and forget the tenants compiled longest ago
        past MAX_TENANTS: each holds its whole catalog (profile versions, pricebooks), and a
        process serving thousands of tenants kept every one it had ever served."""
        tenant = view.tenant_id
        before = self._cache.pop(tenant, None)  # to the end: the order is the order of compiling
        self._cache[tenant] = view
        if self.on_version is not None and (
            before is None or before.snapshot.version != view.snapshot.version
        ):
            self.on_version(tenant, before.snapshot if before else None, view.snapshot)
        self._retry_at.pop(tenant, None)
        while len(self._cache) > MAX_TENANTS:
            oldest = next(iter(self._cache))
            del self._cache[oldest]
            self._retry_at.pop(oldest, None)
            lock = self._locks.get(oldest)
            if lock is not None and not lock.locked():
                del self._locks[oldest]
        return view

    def _refresh_if_old(self, view: CatalogView) -> None:
        """Read a snapshot's statistics again once they are past their refresh, in a task of
        its own: the calls meanwhile route on the one they have (its catalog is current; only
        the statistics are that old)."""
        tenant = view.tenant_id
        now = time.monotonic()
        if now - view.compiled_at < self._stats.refresh or tenant in self._refreshing:
            return
        if now < self._retry_at.get(tenant, 0.0):
            return
        task = asyncio.get_running_loop().create_task(self._refresh(tenant, view))
        self._refreshing[tenant] = task
        task.add_done_callback(lambda _: self._refreshing.pop(tenant, None))

    async def _refresh(self, tenant_id: str, old: CatalogView) -> None:
        """The statistics alone, one statement, the rest of the snapshot as it was (its
        version is still current, or the next call compiles it whole anyway): reading the
        whole catalog again took six statements and more a tenant, every refresh."""
        lock = self._locks.get(tenant_id)
        if lock is None or self._cache.get(tenant_id) is not old:
            return  # forgotten, or compiled anew meanwhile: nothing to refresh
        try:
            async with lock:
                if self._cache.get(tenant_id) is not old:  # compiled anew meanwhile
                    return
                compiled_at = time.monotonic()
                since = datetime.now(UTC) - self._stats.window
                ids = [d.deployment_id for d in old.snapshot.data.deployments]
                async with self._sessions() as session:
                    stats = await load_stats(session, tenant_id, ids, since)
                data = old.snapshot.data.model_copy(update={"stats": stats})
                snapshot = CatalogSnapshot(data)
                self._keep(CatalogView(tenant_id, snapshot, old.weights, compiled_at))
        except Exception as exc:  # the store away: the snapshot serves on, tried again later
            self._retry_at[tenant_id] = time.monotonic() + self._stats.refresh
            log.warning("routing statistics not refreshed: %s", type(exc).__name__)


@dataclass(frozen=True)
class CatalogView:
    """The tenant's catalog at one version, read once per call: the profile versions, the
    deployments (state, health and endpoint reference included) and the planner's inputs. Every
    catalog write bumps the version, so a view taken at the call's start is as current as
    reading the rows would be — without the reads."""

    tenant_id: str
    snapshot: CatalogSnapshot
    weights: Weights
    # When it was compiled (time.monotonic()): its probe statistics are that old.
    compiled_at: float = 0.0
    # The same catalog with every Degraded or unhealthy deployment well, compiled only when an
    # outage asks who the primary would have been (once per catalog version).
    _healed: list[CatalogSnapshot] = field(default_factory=list, compare=False, repr=False)

    def current_profile(self, profile_id: str) -> ModelProfile:
        """The newest active version, for a call that decides a plan."""
        profile = self.snapshot.profile(self.tenant_id, profile_id)
        if profile is None:
            raise self._unknown(profile_id)
        return profile

    def profile_at(self, profile_id: str, version: str) -> ModelProfile:
        """An exact version, whatever its status now: versions are immutable and kept, so a run
        keeps the fallback rules and price basis it started with even after that version is
        retired or superseded."""
        profile = self.snapshot.profile(self.tenant_id, profile_id, version)
        if profile is None and self.snapshot.unreadable(self.tenant_id, profile_id):
            raise ProfileUnreadable(profile_id)
        if profile is None:
            # Versions are never deleted: a plan naming a missing one is a broken store.
            raise LookupError(f"route plan names profile {profile_id} version {version}")
        return profile

    def _unknown(self, profile_id: str) -> UnknownProfile:
        if self.snapshot.unreadable(self.tenant_id, profile_id):
            return ProfileUnreadable(profile_id)
        return UnknownProfile(profile_id)

    def decide(self, profile: ModelProfile, request: PlanRequest) -> RoutePlanResult:
        # Pure: the planner does no I/O.
        decision = plan_route(
            self.snapshot, profile, request, now=datetime.now(UTC), weights=self.weights
        )
        return decision.to_result()

    def primary(self, plan: RoutePlanResult, profile: ModelProfile, request: PlanRequest) -> str:
        """The deployment a decision would have put first were no candidate Degraded,
        unhealthy or in a draining pool: the plan's first candidate when nothing was passed
        over for health. An answer from anyone else is a fallback."""
        first = plan.candidate_ids[0] if plan.candidates else ""
        if not self_clearing(plan):
            return first
        ids = self._well(profile, request, plan.resolved_at).candidate_ids
        # Only a deployment passed over for health stands first in the plan's place. Scores are
        # relative to the survivors' best price and latency, so the healed decision may order
        # the well ones otherwise: its first, if called now too, named a fallback from a
        # deployment never tried (measured: a Degraded cheap one reordered two others).
        if not ids or ids[0] in plan.candidate_ids:
            return first
        return ids[0]

    def well_candidates(self, profile: ModelProfile, request: PlanRequest) -> list[str]:
        """The candidates a decision would have were no deployment Degraded or unhealthy and
        every pool serving: each one checked as a decision checks it (the tenant policy for the
        call's data, regions, thresholds, the budget), which an exclusion for health, made
        first, never was."""
        return self._well(profile, request, datetime.now(UTC)).candidate_ids

    def to_pin(
        self, plan: RoutePlanResult, profile: ModelProfile, request: PlanRequest
    ) -> RoutePlanResult:
        """What a run pins of `plan`, a decision made now: its candidates as that decision
        would have them were every deployment well (`well_candidates`, in that decision's
        order), so that a deployment Degraded, unhealthy or in a draining pool at the run's
        first call stays in its plan, skipped by `targets` while it is, and called again once
        it recovers: "Degraded deployments are skipped by the router without changing the
        route plan". Pinned as they were now, a run begun during an outage kept only the
        deployments well at that moment, for good. A decision with no candidate now is
        returned as it is (it is not pinned: store.route_plans.NothingToPin)."""
        if not plan.candidates or not self_clearing(plan):
            return plan
        well = self._well(profile, request, plan.resolved_at)
        return plan.model_copy(update={"candidates": well.candidates})

    def to_refuse(
        self, plan: RoutePlanResult, profile: ModelProfile, request: PlanRequest
    ) -> RoutePlanResult:
        """The decision an empty `plan`'s refusal is read from: `plan` itself, unless a
        Degraded, unhealthy or draining deployment is among its exclusions and the decision
        would be empty even were every deployment well; then that healed decision, which says
        what else keeps each one out. Health is the planner's first filter, so it hid a policy
        denial: a call the policy refuses was a transient 503 while a deployment it refuses was
        Degraded, and the 403 once it recovered."""
        if plan.candidates or not self_clearing(plan):
            return plan
        well = self._well(profile, request, plan.resolved_at)
        return plan if well.candidates else well

    def _well(self, profile: ModelProfile, request: PlanRequest, now: datetime) -> RoutePlanResult:
        """The decision on this catalog as if every Degraded or unhealthy deployment were well
        and every pool serving (its healed snapshot compiled once per catalog version)."""
        if not self._healed:
            self._healed.append(CatalogSnapshot(healed(self.snapshot.data)))
        well = plan_route(self._healed[0], profile, request, now=now, weights=self.weights)
        return well.to_result()

    def passed_over(self, plan: RoutePlanResult | None, deployment_id: str) -> str | None:
        """Why `deployment_id` is not called now: its exclusion in the decision, or (on a
        pinned plan) its state; None when it is routable."""
        for e in plan.excluded if plan is not None else ():
            if e.deployment_id == deployment_id and e.code is not ExclusionCode.UNHEALTHY:
                return e.code.value
        d = self.snapshot.deployment(self.tenant_id, deployment_id)
        reason = passed_over(d)
        if reason is None and (d is None or d.endpoint_ref is None):
            return "not_in_catalog"
        if reason is None and d is not None and (found := self._refusal(d)) is not None:
            return found[0].value  # its pool draining or offline
        return reason

    def exclusion_of(self, deployment_id: str) -> str:
        """The exclusion code a decision gives the deployment for its state or pool now
        (`unhealthy` for a Degraded one too), `not_in_catalog` when it is gone, else
        `no_candidate` (routable, but not taking this call)."""
        d = self.snapshot.deployment(self.tenant_id, deployment_id)
        if d is None:
            return ExclusionCode.NOT_IN_CATALOG.value
        found = self._refusal(d)
        return found[0].value if found is not None else "no_candidate"

    def _refusal(self, d: CatalogDeployment) -> tuple[ExclusionCode, dict[str, Any]] | None:
        """Why `d` may not be called now, as a decision would exclude it (domain.cohort): not
        Approved and healthy, or its pool draining or offline."""
        pool = self._pools.get(d.compute_pool_id) if d.compute_pool_id else None
        return lifecycle_exclusion(d, pool)

    @cached_property
    def _pools(self) -> dict[str, PoolState]:
        return {p.pool_id: p.state for p in self.snapshot.data.pools}

    def may_stand_in(
        self, deployment_id: str, data_classification: str, allowed_privacy_classes: list[str]
    ) -> bool:
        """Whether the deployment may answer a call of this data in place of the plan's primary
        (domain.fallback `may_stand_in`); one gone from the catalog is never called anyway."""
        d = self.snapshot.deployment(self.tenant_id, deployment_id)
        if d is None:
            return True
        external = d.privacy_class is PrivacyClass.EXTERNAL
        return may_stand_in(
            data_classification, allowed_privacy_classes, d.privacy_class.value, external
        )

    def all_retired(self, candidates: list[str]) -> bool:
        """Every one of these deployments is Retired (or gone from the catalog): none comes
        back, unlike a Degraded or unhealthy one."""
        return all(
            (d := self.snapshot.deployment(self.tenant_id, deployment_id)) is None
            or d.state is DeploymentState.RETIRED
            for deployment_id in candidates
        )

    def targets(
        self,
        candidates: list[str],
        embedding_compatibility: str | None,
        modality: Modality | None = None,
    ) -> list[Target]:
        """The candidates that are routable now, in route order; Degraded or unhealthy ones,
        and those in a draining or offline pool, are skipped, the plan itself never changes."""
        out = []
        for deployment_id in candidates:
            d = self.snapshot.deployment(self.tenant_id, deployment_id)
            if d is None or d.endpoint_ref is None or self._refusal(d) is not None:
                continue
            out.append(
                Target(
                    deployment_id=deployment_id,
                    provider=d.provider,
                    model=d.model,
                    endpoint_ref=d.endpoint_ref,
                    privacy_class=d.privacy_class.value,
                    external=d.privacy_class is PrivacyClass.EXTERNAL,
                    context_window_tokens=d.context_window_tokens,
                    embedding_compatibility=embedding_compatibility,
                    modality=modality,
                )
            )
        return out
