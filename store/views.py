"""Row → domain record conversions."""

from __future__ import annotations

from domain.deployments import DeploymentRecord, LicenseMetadata
from store.tables import ModelDeploymentRow


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
