"""Row → domain record conversions."""

from __future__ import annotations

from pydantic import ValidationError

from domain.cloudevents import OutboxEvent
from domain.deployments import DeploymentRecord, LicenseMetadata
from store.tables import ModelDeploymentRow, OutboxEventRow


def deployment_record(row: ModelDeploymentRow) -> DeploymentRecord:
    return DeploymentRecord(
        deployment_id=row.deployment_id,
        tenant_id=row.tenant_id,
        provider=row.provider,
        model=row.model,
        region=row.region,
        privacy_class=row.privacy_class,
        endpoint_ref=row.endpoint_ref,
        compute_pool_id=row.compute_pool_id,
        capability_evidence_ref=row.capability_evidence_ref,
        license_metadata=(
            LicenseMetadata.model_validate(row.license_metadata) if row.license_metadata else None
        ),
        state=row.state,
        healthy=row.healthy,
        version=row.version,
        context_window_tokens=row.context_window_tokens,
    )


def reads_as_record(row: ModelDeploymentRow) -> bool:
    """Whether the stored row reads as its record: a license written before a rule was
    tightened (`LicenseMetadata` forbids unknown keys), or by hand, does not."""
    try:
        deployment_record(row)
    except ValidationError:
        return False
    return True


def outbox_event(row: OutboxEventRow) -> OutboxEvent:
    """An outbox row as the event its readers take (`/factory/events`, webhook delivery)."""
    return OutboxEvent(
        position=int(row.position or 0),
        event_id=str(row.event_id),
        tenant_id=row.tenant_id,
        event_type=row.event_type,
        topic=row.topic,
        aggregate_type=row.aggregate_type,
        aggregate_id=row.aggregate_id,
        payload=row.payload,
        occurred_at=row.occurred_at,
    )
