"""Integration events: names, topics and payloads as in the spec's message table."""

from __future__ import annotations

from typing import Any

from domain.enums import DeploymentState

TOPICS: dict[str, str] = {
    "ModelProfileActivated": "model-access.profiles.v1.model-profile-activated",
    "ModelProfileRetired": "model-access.profiles.v1.model-profile-retired",
    "DeploymentStateChanged": "model-access.deployments.v1.deployment-state-changed",
    "CapabilityEvidenceRecorded": "model-access.deployments.v1.capability-evidence-recorded",
    "RoutePlanResolved": "model-access.routing.v1.route-plan-resolved",
    "ModelInvoked": "model-access.invocations.v1.model-invoked",
    "ModelFallbackUsed": "model-access.invocations.v1.model-fallback-used",
}


# The events that tell a run's invocations (a receipt's figures, a route plan, a fallback): read
# with the runs' own scope, as ListRunReceipts is. The catalog's events are the catalog readers'.
RUN_EVENTS = frozenset({"RoutePlanResolved", "ModelInvoked", "ModelFallbackUsed"})


# The events that tell a deployment's state, health and evidence: read by who may list
# deployments (GET /factory/model-deployments), not by every reader of the catalog.
DEPLOYMENT_EVENTS = frozenset({"DeploymentStateChanged", "CapabilityEvidenceRecorded"})


def readable(event_type: str, *, reads_runs: bool, reads_deployments: bool = True) -> bool:
    """Whether a reader of the tenant's event feed sees events of `event_type`."""
    if event_type in RUN_EVENTS:
        return reads_runs
    return reads_deployments or event_type not in DEPLOYMENT_EVENTS


def subscribed_types(requested: list[str], *, reads_runs: bool) -> list[str]:
    """The event types a webhook subscription delivers, as its creator may read them: as asked
    (every type when none, stored as the empty list), or without a run's events for a creator
    who may not read runs (listed, then, in place of "every type"). Asking for a run's event
    without reading runs is a ValueError."""
    if reads_runs:
        return list(requested)
    if not requested:
        return [t for t in TOPICS if t not in RUN_EVENTS]
    refused = [t for t in requested if t in RUN_EVENTS]
    if refused:
        raise ValueError(f"{', '.join(refused)} need the scope factory.runs.read")
    return list(requested)


def deployment_state_changed(
    *,
    tenant_id: str,
    deployment_id: str,
    from_state: DeploymentState | None,
    to_state: DeploymentState,
    healthy: bool,
) -> dict[str, Any]:
    """Registration has no prior state, so its event carries fromState null."""
    return {
        "event_type": "DeploymentStateChanged",
        "topic": TOPICS["DeploymentStateChanged"],
        "aggregate_type": "ModelDeployment",
        "aggregate_id": deployment_id,
        "payload": {
            "deploymentId": deployment_id,
            "tenantId": tenant_id,
            "fromState": from_state.value if from_state else None,
            "toState": to_state.value,
            "healthy": healthy,
        },
    }


def capability_evidence_recorded(
    *, tenant_id: str, deployment_id: str, suite_version: str, evidence_ref: str
) -> dict[str, Any]:
    return {
        "event_type": "CapabilityEvidenceRecorded",
        "topic": TOPICS["CapabilityEvidenceRecorded"],
        "aggregate_type": "ModelDeployment",
        "aggregate_id": deployment_id,
        "payload": {
            "deploymentId": deployment_id,
            "tenantId": tenant_id,
            "suiteVersion": suite_version,
            "evidenceRef": evidence_ref,
        },
    }


def profile_activated(
    *, tenant_id: str, profile_id: str, version: str, release_id: str, privacy_class: str
) -> dict[str, Any]:
    return {
        "event_type": "ModelProfileActivated",
        "topic": TOPICS["ModelProfileActivated"],
        "aggregate_type": "ModelProfile",
        "aggregate_id": profile_id,
        "payload": {
            "profileId": profile_id,
            "version": version,
            "tenantId": tenant_id,
            "releaseId": release_id,
            "privacyClass": privacy_class,
        },
    }


def profile_retired(*, tenant_id: str, profile_id: str, version: str) -> dict[str, Any]:
    return {
        "event_type": "ModelProfileRetired",
        "topic": TOPICS["ModelProfileRetired"],
        "aggregate_type": "ModelProfile",
        "aggregate_id": profile_id,
        "payload": {"profileId": profile_id, "version": version, "tenantId": tenant_id},
    }
