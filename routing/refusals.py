"""Why a call or a run gets no route: one typed refusal per answer the caller can be given.
Raised by the routing service; the API maps each to its HTTP problem (api/refusals.py), and
nothing here knows HTTP. Which refusal an empty plan is follows from the meaning each exclusion
code declares in domain.exclusions, so a new code carries its meaning here unedited."""

from __future__ import annotations

from collections.abc import Sequence

from domain.enums import Modality
from domain.exclusions import DENIES, SELF_CLEARING, ExclusionCode, Meaning
from domain.route_plan import Exclusion, RoutePlanResult


class Refusal(Exception):
    """No route for this call."""


class UnknownProfile(Refusal):
    """The tenant has no active version of the profile."""

    def __init__(self, profile_id: str) -> None:
        super().__init__(f"no active profile {profile_id}")
        self.profile_id = profile_id


class ProfileUnreadable(UnknownProfile):
    """A stored version of the profile does not read as this version reads it (written before
    a rule was tightened, or by hand): the profile routes nothing until its row is corrected.
    Left out alone, its newest version's absence routed new runs on an older one, its
    tightening lost, and a run pinned to it failed every call with a 500."""

    def __init__(self, profile_id: str) -> None:
        Refusal.__init__(self, f"profile {profile_id} has a stored version that does not read")
        self.profile_id = profile_id


class WrongModality(Refusal):
    """The profile is of another modality than the operation needs: the caller's mistake,
    refused before any plan is pinned, adapter called or receipt written."""

    def __init__(self, profile_id: str, modality: Modality, needed: Modality) -> None:
        super().__init__(f"profile {profile_id} is {modality.value}, {needed.value} needed")
        self.profile_id = profile_id
        self.modality = modality
        self.needed = needed


class RunPlanRetired(Refusal):
    """Every deployment of a run's pinned plan is Retired: the plan never changes and none of
    them comes back, so the run can take no further call. A new run is planned afresh."""

    def __init__(self, profile_id: str, run_id: object, retired: list[str]) -> None:
        super().__init__(f"every deployment of run {run_id}'s plan is retired")
        self.profile_id = profile_id
        self.run_id = run_id
        self.retired = retired

    @property
    def reason(self) -> str:
        return "run-plan-retired"


class RunPlannedWithoutNeed(Refusal):
    """A run's pinned plan promised no `capability` (its first call did not ask for it), and
    none of its candidates was measured for it: a run of its own is needed."""

    def __init__(self, profile_id: str, run_id: object, capability: str) -> None:
        super().__init__(f"run {run_id} of profile {profile_id} was planned without {capability}")
        self.profile_id = profile_id
        self.run_id = run_id
        self.capability = capability

    @property
    def reason(self) -> str:
        return "run-planned-without-need"


class RunPlannedForOtherData(Refusal):
    """A run's pinned plan was made for less sensitive data than this call carries, and the
    tenant's policy lets none of its candidates see this call's: a run of its own is needed."""

    def __init__(self, profile_id: str, run_id: object, planned: str, call: str) -> None:
        super().__init__(f"run {run_id} of profile {profile_id} was planned for {planned} data")
        self.profile_id = profile_id
        self.run_id = run_id
        self.planned = planned
        self.call = call

    @property
    def reason(self) -> str:
        return "run-planned-for-other-data"


class PolicyDenied(Refusal):
    """The tenant policy is what left the plan without a candidate. Retrying cannot help until
    the caller changes the data classification or an operator the policy."""

    def __init__(self, plan: RoutePlanResult, refused: list[Exclusion]) -> None:
        super().__init__(f"profile {plan.profile_id} denied by tenant policy")
        self.plan = plan
        # The policy's refusals in the profile's order: the first is the most preferred
        # deployment's, and names the reason.
        self.refused = refused

    @property
    def reason(self) -> str:
        return self.refused[0].code.value

    @property
    def about_data(self) -> bool:
        """The refusal is of the data the caller declared, not of the profile's deployments."""
        return self.refused[0].code.meaning is Meaning.DENIED_FOR_DATA


class NoneAvailable(Refusal):
    """Every candidate is Degraded, unhealthy, out of its pool or otherwise not routable now:
    transient, worth a retry."""

    def __init__(
        self,
        profile_id: str,
        waiting_on: list[str],
        excluded: Sequence[tuple[str, str]] = (),
    ) -> None:
        super().__init__(f"no candidate of profile {profile_id} available")
        self.profile_id = profile_id
        # The deployments that may be back soonest: the caller's Retry-After follows them.
        self.waiting_on = waiting_on
        # Why each deployment is not called now, (deployment id, exclusion code), in the
        # profile's order: the spec's "fails with class transient and reason". Without them a
        # mistyped deployment id and an outage gave the caller the same words.
        self.excluded = list(excluded)

    @property
    def reason(self) -> str:
        """Why the call may be served later: the first exclusion that lifts by itself (the
        deployment waited on), else the first of all."""
        for _, code in self.excluded:
            if code in SELF_CLEARING_CODES:
                return code
        return self.excluded[0][1] if self.excluded else "none-available"


def self_clearing(plan: RoutePlanResult) -> bool:
    """Something that lifts without anyone acting keeps a candidate out of this plan."""
    return any(e.code in SELF_CLEARING for e in plan.excluded)


def unhealthy_ids(plan: RoutePlanResult) -> list[str]:
    # Health is the first filter, so one may fail another too: then the caller merely comes
    # back early.
    return [e.deployment_id for e in plan.excluded if e.code is ExclusionCode.UNHEALTHY]


# The self-clearing exclusion codes as the 503 lists them (strings: a pinned plan's come from
# the catalog's state, not a decision).
SELF_CLEARING_CODES = frozenset(c.value for c in SELF_CLEARING)


def exclusions_of(plan: RoutePlanResult) -> list[tuple[str, str]]:
    return [(e.deployment_id, e.code.value) for e in plan.excluded]


def policy_denial(plan: RoutePlanResult) -> PolicyDenied | None:
    """A denial when the tenant policy is what left the plan without a candidate; None when
    the transient "no candidate available" answer is the right one."""
    if plan.candidates:
        return None
    refused = [e for e in plan.excluded if e.code in DENIES]
    if not refused or self_clearing(plan):
        return None
    return PolicyDenied(plan, refused)
