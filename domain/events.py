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
