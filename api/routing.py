"""Routing in the API process: a per-tenant catalog snapshot, rebuilt only when the catalog
version moved, and the pure planner deciding against it with no I/O."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api.problems import Problem
from domain.enums import Modality, PrivacyClass
from domain.exclusions import ExclusionCode
from domain.fallback import healed, passed_over
from domain.invocation import Target
from domain.lifecycle import is_routable
from domain.planner import PlanRequest, plan_route
from domain.profiles import ModelProfile
from domain.route_plan import RoutePlanResult
from domain.scoring import Weights
from domain.snapshot import CatalogSnapshot
from store.catalog_loader import load_catalog, load_weights
from store.receipt_statements import ReceiptStatements


class SnapshotCache:
    def __init__(
        self, sessions: async_sessionmaker[AsyncSession], statements: ReceiptStatements
    ) -> None:
        self._sessions = sessions
        self._statements = statements
        self._cache: dict[str, CatalogView] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def view(self, tenant_id: str) -> CatalogView:
        """One small statement for the catalog version (no session, no ping); the catalog
        itself is read only when that version moved since this tenant's snapshot was compiled.
        Every call sees every committed catalog write: no staleness bound to document."""
        version = await self._statements.catalog_version()
        cached = self._cache.get(tenant_id)
        if cached is not None and cached.snapshot.version == version:
            return cached
        lock = self._locks.setdefault(tenant_id, asyncio.Lock())
        async with lock:
            cached = self._cache.get(tenant_id)
            if cached is not None and cached.snapshot.version >= version:
                return cached
            async with self._sessions() as session:
                version, weights = await load_weights(session)
                data = await load_catalog(session, tenant_id, version)
            built = CatalogView(tenant_id, CatalogSnapshot(data), weights)
            self._cache[tenant_id] = built
            return built


@dataclass(frozen=True)
class CatalogView:
    """The tenant's catalog at one version, read once per call: the profile versions, the
    deployments (state, health and endpoint reference included) and the planner's inputs. Every
    catalog write bumps the version, so a view taken at the call's start is as current as
    reading the rows would be — without the reads."""

    tenant_id: str
    snapshot: CatalogSnapshot
    weights: Weights
    # The same catalog with every Degraded or unhealthy deployment well, compiled only when an
    # outage asks who the primary would have been (once per catalog version).
    _healed: list[CatalogSnapshot] = field(default_factory=list, compare=False, repr=False)

    def current_profile(self, profile_id: str) -> ModelProfile:
        """The newest active version, for a call that decides a plan."""
        profile = self.snapshot.profile(self.tenant_id, profile_id)
        if profile is None:
            raise Problem(404, f"No active profile {profile_id!r}.", field="profileId")
        return profile

    def profile_at(self, profile_id: str, version: str) -> ModelProfile:
        """An exact version, whatever its status now: versions are immutable and kept, so a run
        keeps the fallback rules and price basis it started with even after that version is
        retired or superseded."""
        profile = self.snapshot.profile(self.tenant_id, profile_id, version)
        if profile is None:
            # Versions are never deleted: a plan naming a missing one is a broken store.
            raise LookupError(f"route plan names profile {profile_id} version {version}")
        return profile

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
        if not any(e.code in _SELF_CLEARING for e in plan.excluded):
            return first
        if not self._healed:
            self._healed.append(CatalogSnapshot(healed(self.snapshot.data)))
        well = plan_route(
            self._healed[0], profile, request, now=plan.resolved_at, weights=self.weights
        )
        ids = [c.deployment_id for c in well.to_result().candidates]
        return ids[0] if ids else first

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
        return reason

    def targets(
        self,
        candidates: list[str],
        embedding_compatibility: str | None,
        modality: Modality | None = None,
    ) -> list[Target]:
        """The candidates that are routable now, in route order; Degraded or unhealthy ones
        are skipped, the plan itself never changes."""
        out = []
        for deployment_id in candidates:
            d = self.snapshot.deployment(self.tenant_id, deployment_id)
            if d is None or d.endpoint_ref is None or not is_routable(d.state, d.healthy):
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
