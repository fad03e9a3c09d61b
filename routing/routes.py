"""The routing service: a call's route (Invoke) and a run's pinned plan (ResolveRoutePlan),
decided the same way against the tenant's catalog snapshot, each either a typed result or a
typed refusal (routing.refusals)."""

from __future__ import annotations

import contextlib
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from domain import modality
from domain.constraints import meets_needs, serves_data_of, unpromised_needs
from domain.enums import LatencyClass
from domain.fallback import stand_ins
from domain.invocation import Operation, Target
from domain.planner import PlanRequest
from domain.profiles import ModelProfile
from domain.route_plan import PlanConstraints, RoutePlanResult
from routing.fallback_chain import chain_targets, chain_waiting_on
from routing.refusals import (
    NoneAvailable,
    PolicyDenied,
    Refusal,
    RunPlannedForOtherData,
    RunPlannedWithoutNeed,
    RunPlanRetired,
    WrongModality,
    exclusions_of,
    policy_denial,
    unhealthy_ids,
)
from routing.snapshots import CatalogView, SnapshotCache
from store import route_plans
from store.tables import RoutePlanRow

# Why a run's own plan cannot take a call (each says so in its `reason`).
RunRefusal = RunPlanRetired | RunPlannedForOtherData | RunPlannedWithoutNeed

# Resolved run plans this process keeps (oldest dropped first): a few hundred bytes each.
PINNED_PLANS = 10_000


@dataclass(frozen=True)
class Route:
    """Where a call goes: its targets in route order (the plan's, then its fallback chain's)
    and the rules every attempt keeps."""

    targets: list[Target]
    route_plan_id: uuid.UUID | None  # the run's pinned plan; None for a call without a run
    policy_decision_id: uuid.UUID
    pricing_revision: str  # the profile version's price basis
    fallback_enabled: bool
    allowed_privacy_classes: list[str]
    # The plan's first candidate: a pinned plan's, or whom a decision made now would have put
    # first without the outage. Anyone else answering is a fallback, with the reason this one
    # was passed over before anything was called.
    primary_deployment_id: str
    primary_passed_over: str | None
    # How the profile's workload reads an answer: a Batch profile's streams are held until
    # complete (domain.buffering).
    latency_class: LatencyClass
    # The profile version's maxOutputTokens: no answer on this route asks for more
    # (domain.output_allowance).
    max_output_tokens: int
    # The catalog version it was planned at, and whether that version was read for this call
    # (False: planned on the process's snapshot, to be checked by the claim).
    catalog_version: int = 0
    checked: bool = True


class Routes:
    def __init__(
        self, sessions: async_sessionmaker[AsyncSession], snapshots: SnapshotCache
    ) -> None:
        self._sessions = sessions
        self._snapshots = snapshots
        self._plans: OrderedDict[tuple[str, uuid.UUID, str], RoutePlanRow] = OrderedDict()

    async def decide(self, needs: PlanRequest, profile_id: str) -> RoutePlanResult:
        """The decision for the profile's newest active version now, pinned nowhere: the
        route-plan preview, and what ResolveRoutePlan pins (CatalogView.to_pin)."""
        view = await self._snapshots.view(needs.tenant_id)
        return view.decide(view.current_profile(profile_id), needs)

    async def pin(
        self, needs: PlanRequest, profile_id: str, run_id: uuid.UUID
    ) -> tuple[RoutePlanRow, bool]:
        """The run's plan for the profile (and whether this call created it), resolved once:
        the decision now, its candidates as if every deployment were well (CatalogView.to_pin);
        an empty decision is not pinned but refused (PolicyDenied or NoneAvailable)."""

        seen: list[tuple[CatalogView, ModelProfile]] = []

        async def decide() -> RoutePlanResult:
            view = await self._snapshots.view(needs.tenant_id)
            profile = view.current_profile(profile_id)
            seen.append((view, profile))
            return view.to_pin(view.decide(profile, needs), profile, needs)

        try:
            return await route_plans.resolve_once(
                self._sessions, needs.tenant_id, run_id, profile_id, decide
            )
        except route_plans.NothingToPin as empty:
            # Nothing is pinned: the run asks again once the policy or the catalog allows.
            view, profile = seen[-1]
            refusal = view.to_refuse(empty.plan, profile, needs)
            raise _empty(refusal, profile_id, unhealthy_ids(empty.plan)) from None

    async def route(
        self,
        needs: PlanRequest,
        profile_id: str,
        run_id: uuid.UUID | None,
        operation: Operation,
        *,
        cached: bool = False,
    ) -> Route:
        """The call's route: on a run, its pinned plan (from this process's memory once seen);
        otherwise a decision made now. Raises a Refusal when there is none.

        `cached`: the route may be planned on this process's snapshot of the catalog without
        reading its version first; the route says so (`checked` False) and the caller's claim
        then checks that version (`ReceiptStatements.claim_at`), asking again with `cached`
        False if the catalog moved. A refusal is only ever given on the current catalog, and
        a run's plan is only ever pinned from it."""
        tenant = needs.tenant_id
        view = self._snapshots.cached(tenant) if cached else None
        if view is not None and (run_id is None or (tenant, run_id, profile_id) in self._plans):
            with contextlib.suppress(Refusal):
                return await self._route_on(view, needs, profile_id, run_id, operation, False)
        # The catalog at its current version, read once: profiles, deployments and the
        # planner's inputs come from it, with no further reads on this path.
        view = await self._snapshots.view(tenant)
        return await self._route_on(view, needs, profile_id, run_id, operation, True)

    async def _route_on(
        self,
        view: CatalogView,
        needs: PlanRequest,
        profile_id: str,
        run_id: uuid.UUID | None,
        operation: Operation,
        checked: bool,
    ) -> Route:
        tenant = needs.tenant_id
        # The plan this call decided, if it decided one (a call on a run's plan does not).
        decided: list[RoutePlanResult] = []

        async def decide_now() -> RoutePlanResult:
            current = view.current_profile(profile_id)
            _check_modality(current, operation)  # before a plan is pinned for the wrong call
            decided.append(view.decide(current, needs))
            return decided[0]

        async def decide_to_pin() -> RoutePlanResult:
            plan = await decide_now()
            return view.to_pin(plan, view.current_profile(profile_id), needs)

        row = None
        needed: tuple[tuple[str, float], ...] = ()
        # Why the run's own plan cannot take this call, if it cannot: the answer only when the
        # profile's fallback chain (when enabled) has no target for it either, as for a plan
        # whose deployments are all Degraded. Refused at once, an enabled chain that could serve
        # the call was never tried.
        refused: RunRefusal | None = None
        if run_id is not None:
            pinned = (tenant, run_id, profile_id)
            row = self._plans.get(pinned)
            if row is None:
                # An empty route is not pinned (the run decides again next call): then this
                # call goes on with the decision just made, as a call without a run would.
                with contextlib.suppress(route_plans.NothingToPin):
                    row, _ = await route_plans.resolve_once(
                        self._sessions, tenant, run_id, profile_id, decide_to_pin
                    )
                if row is not None:
                    self._remember(pinned, row)
        if row is not None:
            version, plan_id, candidates = row.profile_version, row.route_plan_id, row.candidates
            constraints = PlanConstraints.model_validate(row.constraints)
            decision_id = row.policy_decision_id or uuid.uuid4()
            if candidates and view.all_retired(candidates):
                # A 503 to come back after was a retry for ever: Retired is for good, and a
                # plan never changes.
                refused = RunPlanRetired(profile_id, run_id, candidates)
            # A call carrying more sensitive data than the run was planned for keeps only the
            # candidates the tenant's policy lets see it; none left is the policy's refusal.
            planned, call = constraints.data_classification, needs.data_classification
            if call.more_sensitive_than(planned):
                candidates, refused = _kept(
                    view,
                    candidates,
                    lambda d: serves_data_of(view.snapshot, tenant, d, planned, call),
                    RunPlannedForOtherData(profile_id, run_id, planned.value, call.value),
                    refused,
                )
            # A call needing tools or structured output the plan does not promise keeps only
            # the candidates measured for it; none left is a refusal, as for data above.
            needed = unpromised_needs(constraints, needs.needs_tools, needs.needs_structured_output)
            if needed:
                candidates, refused = _kept(
                    view,
                    candidates,
                    lambda d: meets_needs(view.snapshot, tenant, d, needed),
                    RunPlannedWithoutNeed(profile_id, run_id, needed[0][0]),
                    refused,
                )
        else:
            plan = decided[0] if decided else await decide_now()
            version, plan_id, candidates = plan.profile_version, None, plan.candidate_ids
            constraints, decision_id = plan.constraints, plan.policy_decision_id
        # The version the route was planned with. A run's plan fixes it, retired or superseded
        # since: the fallback rules and price basis of every attempt are the ones it began with.
        profile = view.profile_at(profile_id, version)
        _check_modality(profile, operation)
        targets = view.targets(candidates, profile.embedding_compatibility, profile.modality)
        chained = chain_targets(view, profile, needs, constraints, set(candidates))
        if row is not None and needed:
            chained = [
                t for t in chained if meets_needs(view.snapshot, tenant, t.deployment_id, needed)
            ]
        targets += chained
        pinned_primary = (candidates[0] if candidates else "") if row is not None else None
        if refused is not None and not candidates and row is not None and row.candidates:
            pinned_primary = row.candidates[0]  # none of the plan's takes the call
        first = _first(view, profile, needs, pinned_primary, decided)
        # The primary the receipt names: anyone else answering is a fallback.
        primary = first or (profile.allowed_deployments or [""])[0]
        # Anyone but the primary answers in its place, whether the primary failed or was passed
        # over before any call (Degraded, unhealthy, by the budget): the privacy rule of every
        # fallback (domain.fallback) holds for each, here where the targets are built, so that
        # the budget, the breakers and the attempts see only those. Held only after a failure,
        # a Confidential call whose primary was Degraded went to an External deployment.
        allowed = [c.value for c in constraints.allowed_privacy_classes]
        data_class = needs.data_classification

        def stands_in(deployment_id: str) -> bool:
            return deployment_id == primary or view.may_stand_in(deployment_id, data_class, allowed)

        targets = stand_ins(targets, primary, data_class, allowed)
        if refused is not None and not targets:
            # The chain may take the call once a deployment of it is back: a 503 to come back
            # after, not the run's refusal for good.
            waiting = chain_waiting_on(view, profile, needs, constraints, set(candidates))
            if row is not None and needed:
                waiting = [d for d in waiting if meets_needs(view.snapshot, tenant, d, needed)]
            waiting = [d for d in waiting if stands_in(d)]
            if waiting:
                raise NoneAvailable(profile_id, waiting, _why_not(view, waiting))
            raise refused
        if not targets and not candidates and not decided:
            # The plan stores no exclusions: a pinned empty plan (ResolveRoutePlan pinned them
            # before empty routes stopped being pinned) is explained by deciding again with its
            # version; the plan itself does not change.
            decided.append(view.decide(profile, needs))
        if not targets:
            # A plan decided now leaves Degraded deployments out; they may be back soonest. One
            # that may not stand in for the primary is waited on by no call of this data.
            unhealthy = [d for p in decided for d in unhealthy_ids(p)]
            waiting_on = [d for d in (*candidates, *unhealthy) if stands_in(d)]
            if candidates:
                raise NoneAvailable(profile_id, waiting_on, _why_not(view, candidates))
            # The fallback chain's deployments that would take the call once well: a 503 to come
            # back after, whatever refused the profile's own (a policy denial of them too).
            chain = chain_waiting_on(view, profile, needs, constraints, set(candidates))
            if chain := [d for d in chain if stands_in(d)]:
                excluded = exclusions_of(decided[0]) + _why_not(view, chain)
                raise NoneAvailable(profile_id, [*waiting_on, *chain], excluded)
            raise _empty(view.to_refuse(decided[0], profile, needs), profile_id, waiting_on)
        passed_over = _passed_over(view, targets, first, pinned_primary, decided)
        if refused is not None and passed_over is not None:
            # The chain answers what the run's plan could not: the plan's first was passed over
            # for the reason the run alone would have been refused.
            passed_over = refused.reason
        # The revision the decision priced the candidates at (domain/snapshot.py
        # `pricebook_for`: the profile's priceBasis, else the current one): admission and the
        # receipt price the call at the same. On the priceBasis as written, a profile naming a
        # revision never published was routed on the current prices while every budgeted call
        # was denied `no-price` and every other receipt went without a cost, for good.
        book = view.snapshot.pricebook_for(profile)
        return Route(
            targets=targets,
            route_plan_id=plan_id,
            policy_decision_id=decision_id,
            pricing_revision=book.revision if book is not None else profile.price_basis,
            fallback_enabled=profile.fallback_enabled,
            allowed_privacy_classes=allowed,
            primary_deployment_id=primary,
            primary_passed_over=passed_over,
            latency_class=profile.latency_class,
            max_output_tokens=profile.max_output_tokens,
            catalog_version=view.snapshot.version,
            checked=checked,
        )

    def _remember(self, pinned: tuple[str, uuid.UUID, str], row: RoutePlanRow) -> None:
        # A pinned plan never changes (store/route_plans.py): the run's later calls on this
        # process read it from memory, so a call on a resolved run costs no extra round trip.
        self._plans[pinned] = row
        if len(self._plans) > PINNED_PLANS:
            self._plans.popitem(last=False)


def _kept(
    view: CatalogView,
    candidates: list[str],
    takes: Callable[[str], bool],
    refusal: RunRefusal,
    refused: RunRefusal | None,
) -> tuple[list[str], RunRefusal | None]:
    """The run's candidates that take this call, and why the run cannot take it: `refused`
    as it was, else `refusal` when none but Retired ones would (those never answer again:
    kept, a call only they take waited on them for ever)."""
    kept = [d for d in candidates if takes(d)]
    if candidates and (not kept or view.all_retired(kept)):
        return kept, refused or refusal
    return kept, refused


def _empty(
    plan: RoutePlanResult, profile_id: str, waiting_on: list[str]
) -> PolicyDenied | NoneAvailable:
    """The refusal for a plan with no candidate: the policy's denial when the policy is what
    emptied it, otherwise none available."""
    return policy_denial(plan) or NoneAvailable(profile_id, waiting_on, exclusions_of(plan))


def _why_not(view: CatalogView, deployment_ids: list[str]) -> list[tuple[str, str]]:
    """Why each of a pinned plan's (or a chain's) deployments is not called now, in the
    exclusion codes a decision's 503 lists (CatalogView.exclusion_of)."""
    return [(d, view.exclusion_of(d)) for d in deployment_ids]


def _first(
    view: CatalogView,
    profile: ModelProfile,
    needs: PlanRequest,
    pinned_primary: str | None,
    decided: list[RoutePlanResult],
) -> str:
    """The plan's first candidate: a pinned plan's, or whom a decision made now would have put
    first without the outage; "" for none."""
    if pinned_primary is not None:
        return pinned_primary
    return view.primary(decided[0], profile, needs)


def _passed_over(
    view: CatalogView,
    targets: list[Target],
    first: str,
    pinned_primary: str | None,
    decided: list[RoutePlanResult],
) -> str | None:
    """Why the plan's first candidate was passed over before any call (None when it is called
    first)."""
    if targets[0].deployment_id == first:
        return None
    plan = None if pinned_primary is not None else decided[0]
    skipped = view.passed_over(plan, first) if first else None
    return skipped or "no_candidate"


def _check_modality(profile: ModelProfile, operation: Operation) -> None:
    needed = modality.mismatch(profile.modality, operation)
    if needed is not None:
        raise WrongModality(profile.profile_id, profile.modality, needed)
