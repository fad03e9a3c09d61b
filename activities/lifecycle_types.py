"""Inputs and outputs of the lifecycle activities and workflow (plain pydantic models)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from domain.approval import IntendedUse
from domain.deployments import DeploymentRecord, DeploymentRegistration, LicenseMetadata
from domain.lifecycle import Transition


class RegisterCandidateInput(BaseModel):
    tenant_id: str
    registration: DeploymentRegistration


class RegisterCandidateResult(BaseModel):
    created: bool
    deployment: DeploymentRecord


class CapabilityMeasurement(BaseModel):
    score: float = Field(ge=0, le=1)
    verdict: str


class EvidenceInput(BaseModel):
    """An evaluation record's outcome, as the evidence importer hands it over."""

    evidence_ref: str
    suite_version: str
    evaluated_at: datetime
    scores: dict[str, CapabilityMeasurement]


class TransitionInput(BaseModel):
    tenant_id: str
    deployment_id: str
    transition: Transition
    expected_version: int
    license: LicenseMetadata | None = None
    evidence: EvidenceInput | None = None


class ApprovalCheckInput(BaseModel):
    tenant_id: str
    deployment_id: str
    intended_use: list[IntendedUse]


class LifecycleInput(BaseModel):
    tenant_id: str
    deployment_id: str
    registration: DeploymentRegistration | None = None
    idempotency_key: str | None = None
    # Carried across continue-as-new so the new run starts from the projection it had.
    record: DeploymentRecord | None = None
    created_by_key: str | None = None
    # Far below Temporal's limits; a deployment sees a few transitions a day.
    max_transitions_per_run: int = Field(default=200, ge=1)


class RegisterRequest(BaseModel):
    idempotency_key: str


class ApproveRequest(BaseModel):
    intended_use: list[IntendedUse]
