"""Which candidate may answer after another failed: pure rules over what the route plan and the
profile guarantee. Candidates come in route order and already satisfy the plan's constraints
(the planner put them there); these rules are checked again here so that a fallback can never
weaken privacy, and so that a profile's fallback chain is held to the same guarantees."""

from __future__ import annotations

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


def may_answer(data: InvocationInput, failed: Target, candidate: Target, reason: str) -> bool:
    """May `candidate` answer after `failed` did not, for `reason` (an error kind, or
    `circuit_open` when `failed` was skipped)?"""
    if not data.fallback_enabled:
        return False
    if data.data_classification in CONFIDENTIAL and candidate.external:
        return False
    if data.allowed_privacy_classes and candidate.privacy_class not in (
        data.allowed_privacy_classes
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
