"""The invocation's targets: the pinned plan's routable candidates in route order, then, when
the profile enables fallback, the routable candidates of its fallback chain's profiles that
satisfy the same plan constraints (so a fallback never weakens privacy, region, tools,
structured output, context or capability guarantees)."""

from __future__ import annotations

from collections.abc import Iterator

from domain.constraints import satisfies_constraints
from domain.invocation import Target
from domain.planner import PlanRequest
from domain.profiles import ModelProfile
from domain.route_plan import PlanConstraints
from routing.refusals import UnknownProfile
from routing.snapshots import CatalogView


def _chain_profiles(view: CatalogView, profile: ModelProfile) -> Iterator[ModelProfile]:
    """The profiles a call may fall back to, in the chain's order: none when fallback is off;
    a retired fallback profile offers nothing, nor one whose embeddings do not compare."""
    if not profile.fallback_enabled:
        return
    for fallback_id in profile.fallback_chain:
        try:
            other = view.current_profile(fallback_id)
        except UnknownProfile:
            continue
        if other.embedding_compatibility == profile.embedding_compatibility:
            yield other


def chain_targets(
    view: CatalogView,
    profile: ModelProfile,
    needs: PlanRequest,
    constraints: PlanConstraints,
    have: set[str],
) -> list[Target]:
    out: list[Target] = []
    for other in _chain_profiles(view, profile):
        plan = view.decide(other, needs)
        ids = [
            d
            for d in plan.candidate_ids
            if d not in have
            and satisfies_constraints(view.snapshot, view.tenant_id, d, constraints)
        ]
        have.update(ids)
        out += view.targets(ids, other.embedding_compatibility, other.modality)
    return out


def chain_waiting_on(
    view: CatalogView,
    profile: ModelProfile,
    needs: PlanRequest,
    constraints: PlanConstraints,
    have: set[str],
) -> list[str]:
    """The fallback chain's deployments that would take the call were they well, but are not
    routable now (Degraded, unhealthy, their pool draining or offline): what a run whose own
    plan cannot take a call waits on, when the chain has no target for it this moment. Refused
    as its plan's refusal meanwhile (a 409 `run-plan-retired`, "for good"), such a run was told
    to stop while its chain would have served it a minute later. Each is decided as if every
    deployment were well, so a deployment the policy, a region or a threshold would refuse
    anyway is never waited on."""
    waiting: list[str] = []
    for other in _chain_profiles(view, profile):
        waiting += [
            d
            for d in view.well_candidates(other, needs)
            if d not in have
            and d not in waiting
            and satisfies_constraints(view.snapshot, view.tenant_id, d, constraints)
        ]
    return waiting
