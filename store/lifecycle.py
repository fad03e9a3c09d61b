"""Writes behind the deployment lifecycle: the deployment row is a projection of the lifecycle
workflow's state, written with optimistic concurrency on `version`, each change with its events
(and any evidence's score rows) in the caller's one transaction."""

from __future__ import annotations

from decimal import Decimal

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from domain.deployments import DeploymentRegistration, EvidenceInput, LicenseMetadata
from domain.enums import DeploymentState
from domain.events import capability_evidence_recorded, deployment_state_changed
from domain.lifecycle import Transition, healthy_in, next_state
from store import catalog_state
from store.repositories import ModelDeploymentRepository, OutboxRepository
from store.tables import CapabilityScoreRow, ModelDeploymentRow


class DeploymentMissing(Exception):
    """No such deployment for this tenant."""


class VersionConflict(Exception):
    """The row moved on under another writer: nothing was written."""


async def insert_candidate(
    session: AsyncSession, tenant_id: str, reg: DeploymentRegistration
) -> tuple[bool, ModelDeploymentRow]:
    """Insert the Candidate row and its DeploymentStateChanged event. An existing row (a retry
    after a lost acknowledgement) is returned, not rewritten; the flag says which."""
    deployments = ModelDeploymentRepository(session, tenant_id)
    existing = await deployments.get(reg.deployment_id)
    if existing is not None:
        return False, existing
    row = ModelDeploymentRow(
        tenant_id=tenant_id,
        deployment_id=reg.deployment_id,
        provider=reg.provider,
        model=reg.model,
        region=reg.region,
        privacy_class=reg.privacy_class,
        endpoint_ref=reg.endpoint_ref,
        compute_pool_id=reg.compute_pool_id,
        context_window_tokens=reg.context_window_tokens,
        license_metadata=(
            reg.license_metadata.model_dump(by_alias=True) if reg.license_metadata else None
        ),
        state=DeploymentState.CANDIDATE,
        healthy=True,
        version=1,
    )
    deployments.add(row)
    await catalog_state.bump(session)
    OutboxRepository(session, tenant_id).append(
        **deployment_state_changed(
            tenant_id=tenant_id,
            deployment_id=reg.deployment_id,
            from_state=None,
            to_state=DeploymentState.CANDIDATE,
            healthy=True,
        )
    )
    return True, row


async def apply_transition(
    session: AsyncSession,
    tenant_id: str,
    deployment_id: str,
    transition: Transition,
    expected_version: int,
    *,
    license_: LicenseMetadata | None = None,
    evidence: EvidenceInput | None = None,
) -> ModelDeploymentRow:
    """Move the row from `expected_version` through `transition`, with its events. A retry of
    an attempt that committed but was never acknowledged finds the row one version on, in the
    state this transition leads to, and returns it unchanged."""
    row = await ModelDeploymentRepository(session, tenant_id).get(deployment_id)
    if row is None:
        raise DeploymentMissing(deployment_id)
    if row.version != expected_version:
        if row.version == expected_version + 1:
            return row
        raise VersionConflict(f"version {row.version}, expected {expected_version}")
    before_state, before_healthy = row.state, row.healthy
    to_state = next_state(row.state, transition)
    values: dict[str, object] = {
        "state": to_state,
        "healthy": healthy_in(to_state, transition, row.healthy),
        "version": row.version + 1,
    }
    if transition is Transition.RECORD_LICENSE and license_ is not None:
        values["license_metadata"] = license_.model_dump(by_alias=True)
    outbox = OutboxRepository(session, tenant_id)
    if evidence is not None:
        values["capability_evidence_ref"] = evidence.evidence_ref
        for capability, m in sorted(evidence.scores.items()):
            session.add(
                CapabilityScoreRow(
                    tenant_id=tenant_id,
                    deployment_id=deployment_id,
                    capability=capability,
                    verdict=m.verdict,
                    score=Decimal(str(round(m.score, 4))),
                    evaluated_at=evidence.evaluated_at,
                    suite_version=evidence.suite_version,
                    evidence_ref=evidence.evidence_ref,
                )
            )
        outbox.append(
            **capability_evidence_recorded(
                tenant_id=tenant_id,
                deployment_id=deployment_id,
                suite_version=evidence.suite_version,
                evidence_ref=evidence.evidence_ref,
            )
        )
    result = await session.execute(
        update(ModelDeploymentRow)
        .where(col(ModelDeploymentRow.tenant_id) == tenant_id)
        .where(col(ModelDeploymentRow.deployment_id) == deployment_id)
        .where(col(ModelDeploymentRow.version) == expected_version)
        .values(**values)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        raise VersionConflict("concurrent write")
    await catalog_state.bump(session)
    if (to_state, values["healthy"]) != (before_state, before_healthy):
        outbox.append(
            **deployment_state_changed(
                tenant_id=tenant_id,
                deployment_id=deployment_id,
                from_state=before_state,
                to_state=to_state,
                healthy=bool(values["healthy"]),
            )
        )
    await session.flush()
    await session.refresh(row)
    return row
