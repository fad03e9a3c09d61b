"""A plan's constraints: the guarantees every candidate satisfies (privacy, region, tools,
structured output, context, capability thresholds), and an independent check of them."""

from __future__ import annotations

from typing import Any

from domain.cohort import Cohort, capability_exclusion
from domain.enums import Capability
from domain.policy import CompiledPolicy, DataClassification, PolicyVerdict
from domain.route_plan import PlanConstraints
from domain.snapshot import CatalogSnapshot
from domain.suite.suite import DEFAULT_THRESHOLD

STRUCTURED_OUTPUT = (Capability.STRICT_JSON.value, Capability.JSON_SCHEMA.value)
# A request asking for something its profile does not guarantee needs at least a passing
# evaluation of it: measured at the suite's own pass mark. The profile's threshold applies when
# the profile lists the capability. At 0.0 any evaluation would do, a failed one included: a
# deployment whose tool calling scored 0.0 was routed every call with tools (the plan still
# said `tools: strict`).
IMPLIED_THRESHOLD = DEFAULT_THRESHOLD

Thresholds = tuple[tuple[str, float], ...]


def implied_capabilities(cohort: Cohort, needs_tools: bool, needs_structured: bool) -> Thresholds:
    """What a request needs that its profile does not already require."""
    key = ("implied", needs_tools, needs_structured)
    found = cohort.memo.get(key)
    if found is not None:
        return found
    required = dict(cohort.thresholds)
    promises_tools = Capability.TOOL_CALLING.value in required
    promises_structured = any(c in required for c in STRUCTURED_OUTPUT)
    implied = cohort.memo[key] = _beyond(
        promises_tools, promises_structured, needs_tools, needs_structured
    )
    return implied


def _beyond(
    promises_tools: bool, promises_structured: bool, needs_tools: bool, needs_structured: bool
) -> Thresholds:
    """The one rule of what a request needs beyond what is promised of its candidates: tools
    a passing evaluation of tool calling, structured output one of json-schema."""
    out = []
    if needs_tools and not promises_tools:
        out.append((Capability.TOOL_CALLING.value, IMPLIED_THRESHOLD))
    if needs_structured and not promises_structured:
        out.append((Capability.JSON_SCHEMA.value, IMPLIED_THRESHOLD))
    return tuple(out)


def plan_constraints(
    cohort: Cohort,
    policy: CompiledPolicy | None,
    dc: DataClassification,
    implied: Thresholds,
    context: int,
) -> PlanConstraints:
    """A fresh object per decision (callers may hold or change it); what goes into it is
    remembered per cohort, policy, classification and request-implied capabilities."""
    key = ("constraints", policy, dc, implied)
    values: dict[str, Any] | None = cohort.memo.get(key)
    if values is None:
        values = cohort.memo[key] = _constraint_values(cohort, policy, dc, implied)
    return PlanConstraints(**values, context_tokens=context)


def _constraint_values(
    cohort: Cohort, policy: CompiledPolicy | None, dc: DataClassification, implied: Thresholds
) -> dict[str, Any]:
    profile = cohort.profile
    thresholds = dict(sorted((*cohort.thresholds, *implied)))
    floor = profile.privacy_class
    allowed = policy.privacy_classes_for(dc) if policy else frozenset()
    ordered = sorted(
        (c for c in allowed if c.at_least_as_strict_as(floor)), key=lambda c: c.strictness
    )
    regions: frozenset[str] | None = frozenset(profile.allowed_regions) or None
    if policy is not None and policy.regions is not None:
        regions = policy.regions if regions is None else regions & policy.regions
    return {
        "privacy_class": ordered[0] if ordered else floor,
        "allowed_privacy_classes": tuple(ordered),
        "data_classification": dc,
        "regions": tuple(sorted(regions)) if regions is not None else None,
        "tools": "strict" if Capability.TOOL_CALLING.value in thresholds else "none",
        "structured_output": any(c in thresholds for c in STRUCTURED_OUTPUT),
        "capabilities": thresholds,  # validation copies it, so the remembered one stays private
    }


def satisfies_constraints(
    snapshot: CatalogSnapshot, tenant_id: str, deployment_id: str, constraints: PlanConstraints
) -> bool:
    """Checked independently of the planner: does this deployment meet the plan's guarantees?
    Health is not a constraint: it changes during a run, and the invoke path skips unhealthy
    candidates without changing the plan. Useful to vet a fallback against a plan."""
    d = snapshot.deployment(tenant_id, deployment_id)
    if d is None:
        return False
    if d.privacy_class not in constraints.allowed_privacy_classes:
        return False
    if constraints.regions is not None and d.region not in constraints.regions:
        return False
    if d.context_window_tokens is None or d.context_window_tokens < constraints.context_tokens:
        return False
    for cap, threshold in constraints.capabilities.items():
        ev = snapshot.capability(tenant_id, deployment_id, cap)
        if ev is None or not ev.meets(threshold):
            return False
    return True


def serves_data_of(
    snapshot: CatalogSnapshot,
    tenant_id: str,
    deployment_id: str,
    planned: DataClassification,
    call: DataClassification,
) -> bool:
    """May a run's pinned candidate, planned for `planned` data, take a call carrying `call`
    data? Yes when the call's data is no more sensitive than the plan's (the plan's policy
    check covers it); otherwise only if the tenant's policy lets that deployment see `call`
    data now. Without this, a run planned for Internal data sent a later Restricted call to the
    External deployment it had pinned, which the same call without a run is refused."""
    if not call.more_sensitive_than(planned):
        return True
    d = snapshot.deployment(tenant_id, deployment_id)
    policy = snapshot.policy(tenant_id)
    if d is None or policy is None:
        return False
    verdict = policy.verdict(call, d.privacy_class, d.provider, d.region)
    return verdict is PolicyVerdict.ALLOW


def unpromised_needs(
    constraints: PlanConstraints, needs_tools: bool, needs_structured: bool
) -> Thresholds:
    """What a call on a run needs that the run's plan does not promise of its candidates (a
    plan pinned by a first call without tools, say), at the threshold a call without a run
    would be planned with (`implied_capabilities`)."""
    return _beyond(
        constraints.tools == "strict", constraints.structured_output, needs_tools, needs_structured
    )


def meets_needs(
    snapshot: CatalogSnapshot, tenant_id: str, deployment_id: str, needed: Thresholds
) -> bool:
    """Does a pinned candidate's evidence meet what the call needs beyond its plan? Without
    this, a run's later call with tools went to a deployment never measured for tool calling,
    which the same call without a run is never routed to."""
    return all(
        capability_exclusion(snapshot.capability(tenant_id, deployment_id, c), c, t, "request")
        is None
        for c, t in needed
    )
