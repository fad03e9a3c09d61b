"""The route planner: (snapshot, profile, request, clock, weights) -> ordered candidates and
exclusions. Pure: no I/O, no randomness, no clock reads; the same inputs give the same plan,
down to the policy decision id.

Filters run before scores (order in domain.exclusions); evidence thresholds are filters only,
so a deployment under a threshold is never a candidate, however cheap. Candidates are ranked by
score (domain.scoring), ties broken by the profile's preference order; deploymentId would break
the next tie, but a deployment holds exactly one preference position, so none remains.

Work that does not depend on the request is done when the snapshot is compiled (domain.cohort),
once per tenant policy and data classification (domain.admission), and once per price epoch and
weights (the admitted deployments' score columns and best price and latency). A decision runs
the request's own filters, scores the survivors, sorts once, and builds its record.
"""

from __future__ import annotations

import hashlib
import uuid
from bisect import bisect_right
from collections.abc import Sequence
from datetime import UTC, date, datetime

from pydantic import BaseModel, ConfigDict, Field

from domain.admission import admit
from domain.cohort import (
    MEMO_LIMIT,
    Cohort,
    RawExclusion,
    capability_exclusion,
    context_exclusion,
)
from domain.constraints import implied_capabilities, plan_constraints
from domain.exclusions import ExclusionCode
from domain.policy import DataClassification
from domain.profiles import ModelProfile
from domain.route_plan import RoutePlanDecision
from domain.scoring import DEFAULT_WEIGHTS, UNKNOWN, Weights
from domain.snapshot import CatalogSnapshot

_DECISION_NAMESPACE = uuid.UUID("5b0f7f3e-2d7c-5a4e-9a51-6f1d2f0b7c11")
NO_POLICY_REVISION = "none"


class PlanRequest(BaseModel):
    """Who is asking, about what data, needing what."""

    model_config = ConfigDict(
        frozen=True, validate_by_name=True, validate_by_alias=True, extra="forbid"
    )

    tenant_id: str = Field(alias="tenantId", min_length=1)
    data_classification: DataClassification = Field(alias="dataClassification")
    needs_tools: bool = Field(default=False, alias="needsTools")
    needs_structured_output: bool = Field(default=False, alias="needsStructuredOutput")
    # The context window the request needs, when it needs more than the profile's
    # maxContextTokens; both count input and output together.
    context_tokens: int | None = Field(default=None, alias="contextTokens", gt=0)
    # A budget applies (run or tenant): then an unpriced deployment cannot be reserved against
    # and is excluded rather than costed at a fabricated zero.
    budget_applies: bool = Field(default=False, alias="budgetApplies")


def plan_route(
    snapshot: CatalogSnapshot,
    profile: ModelProfile,
    request: PlanRequest,
    *,
    now: datetime,
    weights: Weights = DEFAULT_WEIGHTS,
) -> RoutePlanDecision:
    """Raises ProfileNotVisible (a ValueError) for another tenant's unshared profile, and
    ValueError for a naive `now`."""
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    if now.utcoffset():
        now = now.astimezone(UTC)
    tenant = request.tenant_id
    cohort = snapshot.cohort(tenant, profile)
    policy = snapshot.policy(tenant)
    dc = request.data_classification
    implied = implied_capabilities(cohort, request.needs_tools, request.needs_structured_output)
    profile_context = cohort.profile.max_context_tokens
    context = max(request.context_tokens or 0, profile_context)

    admitted, refused = admit(cohort, policy, dc)
    survivors: Sequence[int] = admitted
    excluded: list[RawExclusion] = list(refused)
    if implied:
        survivors = _capable(cohort, survivors, implied, excluded)
    if context > profile_context:
        survivors = _fits(cohort, survivors, context, excluded)
    day = now.date()
    epoch = bisect_right(cohort.epoch_starts, day.toordinal()) - 1
    costs = cohort.costs_at(epoch)
    if request.budget_applies:
        survivors = _priced(cohort, survivors, costs, day, excluded)

    # score = base + wk * cost term + wl * latency term (domain.scoring), with
    # term = 1 / (1 + (log - best)) rewritten as 1 / (log + (1 - best)) so the loop does one
    # addition and one division per term. A missing value is UNKNOWN (inf): its term here is 0
    # and its NEUTRAL term is already in base.
    if survivors is admitted:
        # The usual case: the request filtered nothing more, so the survivors' columns and
        # bests are those of the admitted set, gathered once per epoch and weights.
        base, cost_col, lat_col, cost_best, lat_best = _admitted_columns(
            cohort, (policy, dc), admitted, epoch, weights
        )
    else:
        full_base, lat = cohort.base_scores(weights, epoch), cohort.latency_log
        base = [full_base[i] for i in survivors]
        cost_col = [costs[i] for i in survivors]
        lat_col = [lat[i] for i in survivors]
        cost_best, lat_best = min(cost_col, default=UNKNOWN), min(lat_col, default=UNKNOWN)
    cost_shift, lat_shift = _shift(cost_best), _shift(lat_best)
    wk, wl = weights.cost, weights.latency
    scores = [
        b + wk / (c + cost_shift) + wl / (x + lat_shift)
        for b, c, x in zip(base, cost_col, lat_col, strict=True)
    ]
    # Survivors are in preference order and the sort is stable (with reverse=True too), so
    # equal scores keep the profile's preference order.
    order = sorted(range(len(scores)), key=scores.__getitem__, reverse=True)

    revision = policy.revision if policy else NO_POLICY_REVISION
    return RoutePlanDecision(
        cohort=cohort,
        tenant_id=tenant,
        constraints=plan_constraints(cohort, policy, dc, implied, context),
        survivors=survivors,
        order=order,
        scores=scores,
        costs=costs,
        bests=(cost_best, lat_best),
        exclusions=excluded,
        snapshot_version=snapshot.version,
        policy_revision=revision,
        policy_decision_id=_decision_id(snapshot, cohort, request, revision, weights, now),
        weights=weights,
        resolved_at=now,
    )


def _admitted_columns(
    cohort: Cohort,
    admission: tuple[object, ...],
    admitted: Sequence[int],
    epoch: int,
    weights: Weights,
) -> tuple[list[float], list[float], list[float], float, float]:
    key = ("columns", *admission, epoch, weights)
    found = cohort.memo.get(key)
    if found is not None:
        return found
    full_base, costs, lat = (
        cohort.base_scores(weights, epoch),
        cohort.costs_at(epoch),
        cohort.latency_log,
    )
    cost_col = [costs[i] for i in admitted]
    lat_col = [lat[i] for i in admitted]
    columns = (
        [full_base[i] for i in admitted],
        cost_col,
        lat_col,
        min(cost_col, default=UNKNOWN),
        min(lat_col, default=UNKNOWN),
    )
    if len(cohort.memo) < MEMO_LIMIT:  # callers choose weights; keep a bound on what we hold
        cohort.memo[key] = columns
    return columns


def _shift(best: float) -> float:
    # With every value unknown, best is inf; an infinite shift keeps inf + shift away from
    # inf - inf (nan) and the term at 0.
    return UNKNOWN if best == UNKNOWN else 1.0 - best


def _capable(
    cohort: Cohort,
    survivors: Sequence[int],
    implied: tuple[tuple[str, float], ...],
    excluded: list[RawExclusion],
) -> Sequence[int]:
    entries = cohort.entries
    for cap, threshold in implied:
        kept = []
        for i in survivors:
            e = entries[i]
            assert e is not None
            found = capability_exclusion(e.capabilities.get(cap), cap, threshold, "request")
            if found is None:
                kept.append(i)
            else:
                excluded.append((i, found[0], found[1]))
        if len(kept) < len(survivors):  # keep the same object when nothing was refused
            survivors = kept
    return survivors


def _fits(
    cohort: Cohort, survivors: Sequence[int], context: int, excluded: list[RawExclusion]
) -> Sequence[int]:
    kept = []
    for i in survivors:
        e = cohort.entries[i]
        assert e is not None
        found = context_exclusion(e.record.context_window_tokens, context)
        if found is None:
            kept.append(i)
        else:
            excluded.append((i, found[0], found[1]))
    return survivors if len(kept) == len(survivors) else kept


def _priced(
    cohort: Cohort,
    survivors: Sequence[int],
    costs: list[float],
    day: date,
    excluded: list[RawExclusion],
) -> Sequence[int]:
    if UNKNOWN not in map(costs.__getitem__, survivors):
        return survivors
    kept = []
    for i in survivors:
        if costs[i] != UNKNOWN:
            kept.append(i)
            continue
        e = cohort.entries[i]
        assert e is not None
        detail = {
            "provider": e.record.provider,
            "model": e.record.model,
            "pricingRevision": cohort.pricing_revision,
            "date": day.isoformat(),
        }
        excluded.append((i, ExclusionCode.NO_PRICE_UNDER_BUDGET, detail))
    return kept


def _decision_id(
    snapshot: CatalogSnapshot,
    cohort: Cohort,
    request: PlanRequest,
    policy_revision: str,
    weights: Weights,
    now: datetime,
) -> uuid.UUID:
    """uuid5 over a canonical encoding of every input, so an identical decision gets the same
    id on any machine and any changed input a different one. The repr of a tuple of str, int,
    bool, None and float is canonical (floats print as the shortest round-tripping string)."""
    # Everything but the clock is remembered per cohort, request, policy revision and weights.
    key = ("decision-id", snapshot.version, request, policy_revision, weights)
    prefix: bytes | None = cohort.memo.get(key)
    if prefix is None:
        name = repr(
            (
                "route-plan/1",
                snapshot.version,
                cohort.fingerprint,
                policy_revision,
                request.tenant_id,
                request.data_classification.value,
                request.needs_tools,
                request.needs_structured_output,
                request.context_tokens,
                request.budget_applies,
                weights.as_tuple(),
            )
        )
        prefix = _DECISION_NAMESPACE.bytes + name.encode()
        if len(cohort.memo) < MEMO_LIMIT:
            cohort.memo[key] = prefix
    tail = repr(now.isoformat())
    # Exactly uuid.uuid5(namespace, name), with the constant part of the name encoded once.
    digest = hashlib.sha1(prefix + tail.encode(), usedforsecurity=False).digest()
    return uuid.UUID(bytes=digest[:16], version=5)
