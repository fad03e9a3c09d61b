"""Which candidate may answer after another failed: pure rules over what the route plan and the
profile guarantee. Candidates come in route order and already satisfy the plan's constraints
(the planner put them there); these rules are checked again here so that a fallback can never
weaken privacy, and so that a profile's fallback chain is held to the same guarantees.

The privacy part (`may_stand_in`) holds for every deployment that answers in the primary's
place, whether the primary failed or was passed over before any call (Degraded, unhealthy,
past the budget): the routing service keeps only such targets on a route
(`stand_ins`), and `may_answer` asks it again after each failure."""

from __future__ import annotations

from collections.abc import Collection
from enum import StrEnum

from domain.catalog import CatalogData, CatalogDeployment
from domain.enums import DeploymentState
from domain.invocation import InvocationInput, Operation, Target


class Next(StrEnum):
    """What a failure means for the rest of the route."""

    # The same request will fail the same way anywhere: the caller hears the provider's reason.
    STOP = "stop"
    # Another candidate may answer (the failure belongs to this deployment).
    MOVE_ON = "move-on"


# The request itself is at fault: no other model is asked. Content policy is propagated with the
# provider's reason; an invalid request is the caller's to fix.
_STOP = frozenset({"content_policy", "invalid_request", "unsupported"})

CONFIDENTIAL = frozenset({"Confidential", "Restricted"})


def after_failure(kind: str) -> Next:
    return Next.STOP if kind in _STOP else Next.MOVE_ON


def may_stand_in(
    data_classification: str,
    allowed_privacy_classes: Collection[str],
    privacy_class: str | None,
    external: bool,
) -> bool:
    """May a deployment of `privacy_class` (`external`: an External provider) answer a call
    carrying `data_classification` data in place of the plan's primary? A confidential workload
    never falls back to an external provider, whatever the tenant's policy let the plan hold,
    and no call falls back to a privacy class the plan does not allow
    (`allowed_privacy_classes` empty: no such restriction)."""
    if data_classification in CONFIDENTIAL and external:
        return False
    return not allowed_privacy_classes or privacy_class in allowed_privacy_classes


def stand_ins(
    targets: list[Target],
    primary: str,
    data_classification: str,
    allowed_privacy_classes: Collection[str],
) -> list[Target]:
    """The route's targets that may be called, in route order: the plan's primary, and every
    other one that may stand in for it (`may_stand_in`). Applied where a route is built, so
    that a primary passed over before any call (Degraded, unhealthy) or by the budget is held
    to the same rule as one that failed."""
    return [
        t
        for t in targets
        if t.deployment_id == primary
        or may_stand_in(data_classification, allowed_privacy_classes, t.privacy_class, t.external)
    ]


def may_answer(data: InvocationInput, failed: Target, candidate: Target, reason: str) -> bool:
    """May `candidate` answer after `failed` did not, for `reason` (an error kind, or
    `circuit_open` when `failed` was skipped)?"""
    if not data.fallback_enabled:
        return False
    if not may_stand_in(
        data.data_classification,
        data.allowed_privacy_classes,
        candidate.privacy_class,
        candidate.external,
    ):
        return False
    if data.operation is Operation.EMBED and (
        candidate.embedding_compatibility != failed.embedding_compatibility
    ):
        return False
    if reason == "context_length":
        # Only a larger window helps; an unknown window proves nothing.
        return (
            candidate.context_window_tokens is not None
            and failed.context_window_tokens is not None
            and candidate.context_window_tokens > failed.context_window_tokens
        )
    return True


def passed_over(d: CatalogDeployment | None) -> str | None:
    """Why the router may not call a plan's candidate now (the reason a fallback names when the
    plan's first candidate is skipped before anything is called); None when it may."""
    if d is None:
        return "not_in_catalog"
    if d.state is DeploymentState.DEGRADED:
        return "degraded"
    if d.state is DeploymentState.APPROVED and not d.healthy:
        return "unhealthy"
    if d.state is not DeploymentState.APPROVED:
        return "not_approved"
    return None


def healed(data: CatalogData) -> CatalogData:
    """The catalog as if every Degraded or unhealthy deployment were well and every pool
    serving: what a decision would have chosen first without the outage, so that an answer from
    anyone else is counted as the fallback it is."""
    well = tuple(
        d.model_copy(update={"state": DeploymentState.APPROVED, "healthy": True})
        if passed_over(d) in ("degraded", "unhealthy")
        else d
        for d in data.deployments
    )
    return data.model_copy(update={"deployments": well, "pools": ()})
