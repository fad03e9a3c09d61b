"""The lifecycle workflow's store steps: register the Candidate row, apply one transition
(both written by `store/lifecycle.py`), and the approval check. Store refusals become the
non-retryable error types the workflow's retry policy names."""

from __future__ import annotations

from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.lifecycle_types import (
    CONFLICT,
    NOT_FOUND,
    UNREADABLE,
    ApprovalCheckInput,
    RegisterCandidateInput,
    RegisterCandidateResult,
    TransitionInput,
)
from domain.approval import Refusal, approval_refusals
from domain.deployments import DeploymentRecord, LicenseMetadata
from domain.profiles import ModelProfile
from store import lifecycle
from store.db import transaction
from store.repositories import (
    CapabilityScoreRepository,
    ModelDeploymentRepository,
    ModelProfileRepository,
)
from store.views import deployment_record, reads_as_record


class LifecycleActivities:
    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    @activity.defn(name="register_candidate")
    async def register_candidate(self, data: RegisterCandidateInput) -> RegisterCandidateResult:
        """Insert the Candidate row and its DeploymentStateChanged event in one transaction.
        An existing row (a retry after a lost acknowledgement) is returned, not rewritten."""
        async with transaction(self._sessions) as session:
            created, row = await lifecycle.insert_candidate(
                session, data.tenant_id, data.registration
            )
            if not created:
                return RegisterCandidateResult(created=False, deployment=deployment_record(row))
        return RegisterCandidateResult(created=True, deployment=deployment_record(row))

    @activity.defn(name="apply_transition")
    async def apply_transition(self, data: TransitionInput) -> DeploymentRecord:
        try:
            async with transaction(self._sessions) as session:
                try:
                    row = await lifecycle.apply_transition(
                        session,
                        data.tenant_id,
                        data.deployment_id,
                        data.transition,
                        data.expected_version,
                        expected_state=data.expected_state,
                        license_=data.license,
                        evidence=data.evidence,
                    )
                except lifecycle.VersionConflict as exc:
                    # The row as it is goes with the refusal (read here, before the rollback
                    # expires it): the workflow adopts it, its copy never left behind the store.
                    stored = (
                        [deployment_record(exc.row).model_dump(mode="json", by_alias=True)]
                        if reads_as_record(exc.row)
                        else []
                    )
                    raise ApplicationError(
                        str(exc), *stored, type=CONFLICT, non_retryable=True
                    ) from None
                return deployment_record(row)
        except lifecycle.DeploymentMissing:
            raise ApplicationError(
                "deployment not found", type=NOT_FOUND, non_retryable=True
            ) from None

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
        try:
            listing = [
                ModelProfile.model_validate(p)
                for p in profiles
                if data.deployment_id in (p.allowed_deployments or [])
            ]
            license_ = (
                LicenseMetadata.model_validate(row.license_metadata)
                if row.license_metadata
                else None
            )
        except ValidationError as exc:
            fields = sorted({".".join(str(p) for p in e["loc"]) for e in exc.errors()})
            raise ApplicationError(
                f"a stored {exc.title} does not read ({', '.join(fields)})",
                type=UNREADABLE,
                non_retryable=True,
            ) from None
        return approval_refusals(license_, data.intended_use, scores, listing)
