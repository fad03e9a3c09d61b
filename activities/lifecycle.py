"""Store writes behind the deployment lifecycle: the row is a projection of the workflow's
state, written with optimistic concurrency, each change with its events in one transaction."""

from __future__ import annotations

from decimal import Decimal

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.lifecycle_types import (
    ApprovalCheckInput,
    RegisterCandidateInput,
    RegisterCandidateResult,
    TransitionInput,
)
from domain.approval import Refusal, approval_refusals
from domain.deployments import DeploymentRecord, LicenseMetadata
from domain.enums import DeploymentState
from domain.events import capability_evidence_recorded, deployment_state_changed
from domain.lifecycle import Transition, healthy_in, next_state
from domain.profiles import ModelProfile
from store import catalog_state
from store.db import transaction
from store.repositories import (
    CapabilityScoreRepository,
    ModelDeploymentRepository,
    ModelProfileRepository,
    OutboxRepository,
)
from store.tables import CapabilityScoreRow, ModelDeploymentRow
from store.views import deployment_record

CONFLICT = "ConcurrencyConflict"
NOT_FOUND = "DeploymentNotFound"


class LifecycleActivities:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    @activity.defn(name="register_candidate")
    async def register_candidate(self, data: RegisterCandidateInput) -> RegisterCandidateResult:
        """Insert the Candidate row and its DeploymentStateChanged event in one transaction.
        An existing row (a retry after a lost acknowledgement) is returned, not rewritten."""
        reg = data.registration
        async with transaction(self._sessions) as session:
            deployments = ModelDeploymentRepository(session, data.tenant_id)
            existing = await deployments.get(reg.deployment_id)
            if existing is not None:
                return RegisterCandidateResult(
                    created=False, deployment=deployment_record(existing)
                )
            row = ModelDeploymentRow(
                tenant_id=data.tenant_id,
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
            OutboxRepository(session, data.tenant_id).append(
                **deployment_state_changed(
                    tenant_id=data.tenant_id,
                    deployment_id=reg.deployment_id,
                    from_state=None,
                    to_state=DeploymentState.CANDIDATE,
                    healthy=True,
                )
            )
        return RegisterCandidateResult(created=True, deployment=deployment_record(row))

    @activity.defn(name="apply_transition")
    async def apply_transition(self, data: TransitionInput) -> DeploymentRecord:
        async with transaction(self._sessions) as session:
            deployments = ModelDeploymentRepository(session, data.tenant_id)
            row = await deployments.get(data.deployment_id)
            if row is None:
                raise ApplicationError("deployment not found", type=NOT_FOUND, non_retryable=True)
            if row.version != data.expected_version:
                # A retry of an attempt that committed but was never acknowledged: the row is
                # already one version on, in the state this transition leads to.
                if row.version == data.expected_version + 1:
                    return deployment_record(row)
                raise ApplicationError(
                    f"version {row.version}, expected {data.expected_version}",
                    type=CONFLICT,
                    non_retryable=True,
                )
            before_state, before_healthy = row.state, row.healthy
            to_state = next_state(row.state, data.transition)
            values: dict[str, object] = {
                "state": to_state,
                "healthy": healthy_in(to_state, data.transition, row.healthy),
                "version": row.version + 1,
            }
            if data.transition is Transition.RECORD_LICENSE and data.license is not None:
                values["license_metadata"] = data.license.model_dump(by_alias=True)
            outbox = OutboxRepository(session, data.tenant_id)
            if data.evidence is not None:
                values["capability_evidence_ref"] = data.evidence.evidence_ref
                for capability, m in sorted(data.evidence.scores.items()):
                    session.add(
                        CapabilityScoreRow(
                            tenant_id=data.tenant_id,
                            deployment_id=data.deployment_id,
                            capability=capability,
                            verdict=m.verdict,
                            score=Decimal(str(round(m.score, 4))),
                            evaluated_at=data.evidence.evaluated_at,
                            suite_version=data.evidence.suite_version,
                            evidence_ref=data.evidence.evidence_ref,
                        )
                    )
                outbox.append(
                    **capability_evidence_recorded(
                        tenant_id=data.tenant_id,
                        deployment_id=data.deployment_id,
                        suite_version=data.evidence.suite_version,
                        evidence_ref=data.evidence.evidence_ref,
                    )
                )
            result = await session.execute(
                update(ModelDeploymentRow)
                .where(col(ModelDeploymentRow.tenant_id) == data.tenant_id)
                .where(col(ModelDeploymentRow.deployment_id) == data.deployment_id)
                .where(col(ModelDeploymentRow.version) == data.expected_version)
                .values(**values)
            )
            if result.rowcount != 1:  # type: ignore[attr-defined]
                raise ApplicationError("concurrent write", type=CONFLICT, non_retryable=True)
            await catalog_state.bump(session)
            if (to_state, values["healthy"]) != (before_state, before_healthy):
                outbox.append(
                    **deployment_state_changed(
                        tenant_id=data.tenant_id,
                        deployment_id=data.deployment_id,
                        from_state=before_state,
                        to_state=to_state,
                        healthy=bool(values["healthy"]),
                    )
                )
            await session.flush()
            await session.refresh(row)
            return deployment_record(row)

    @activity.defn(name="check_approval")
    async def check_approval(self, data: ApprovalCheckInput) -> list[Refusal]:
        async with self._sessions() as session:
            row = await ModelDeploymentRepository(session, data.tenant_id).get(data.deployment_id)
            if row is None:
                raise ApplicationError("deployment not found", type=NOT_FOUND, non_retryable=True)
            scores = await CapabilityScoreRepository(session, data.tenant_id).current(
                data.deployment_id, row.capability_evidence_ref
            )
            profiles = await ModelProfileRepository(session, data.tenant_id).list_active()
        listing = [
            ModelProfile.model_validate(p)
            for p in profiles
            if data.deployment_id in (p.allowed_deployments or [])
        ]
        license_ = (
            LicenseMetadata.model_validate(row.license_metadata) if row.license_metadata else None
        )
        return approval_refusals(license_, data.intended_use, scores, listing)
