"""An outbox event as the webhook tests deliver it: a deployment's state change, of a tenant, at
a feed position. Ids only, never content, as every event is."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from domain.cloudevents import OutboxEvent


def state_changed(
    tenant_id: str = "t", position: int = 1, aggregate_id: str = "a/b"
) -> OutboxEvent:
    return OutboxEvent(
        position=position,
        event_id=str(uuid.uuid4()),
        tenant_id=tenant_id,
        event_type="DeploymentStateChanged",
        topic="model-access.deployments.v1.deployment-state-changed",
        aggregate_type="ModelDeployment",
        aggregate_id=aggregate_id,
        payload={},
        occurred_at=datetime.now(UTC),
    )
