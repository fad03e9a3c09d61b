"""Store writes for the deployment catalog."""

from __future__ import annotations

from pydantic import BaseModel
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio import activity

from domain.deployments import DeploymentRecord, DeploymentRegistration
from domain.enums import DeploymentState
from domain.events import deployment_state_changed
from store.db import transaction
from store.repositories import ModelDeploymentRepository, OutboxRepository
from store.tables import ModelDeploymentRow
from store.views import deployment_record


class RegisterCandidateInput(BaseModel):
    tenant_id: str
    registration: DeploymentRegistration


class RegisterCandidateResult(BaseModel):
    created: bool
    deployment: DeploymentRecord


class DeploymentActivities:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    @activity.defn(name="register_candidate")
    async def register_candidate(self, data: RegisterCandidateInput) -> RegisterCandidateResult:
        """Insert the Candidate row and its DeploymentStateChanged event in one transaction.

        Idempotent under activity retries: if the row exists (a retry after a commit whose
        acknowledgement was lost, or a second registration) nothing is written again.
        """
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
                license_metadata=(
                    reg.license_metadata.model_dump(by_alias=True) if reg.license_metadata else None
                ),
                state=DeploymentState.CANDIDATE,
                healthy=True,
                version=1,
            )
            deployments.add(row)
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
