"""What crosses the deployment lifecycle's workflow boundary: its name and ids, the update each
transition is sent as, the error types it raises, and the inputs and outputs of its activities
(plain pydantic models). Callers drive the workflow through `activities/lifecycle_client.py`."""

from __future__ import annotations

import hashlib

from pydantic import BaseModel, Field

from domain.approval import IntendedUse
from domain.deployments import (
    DeploymentRecord,
    DeploymentRegistration,
    EvidenceInput,
    LicenseMetadata,
)
from domain.enums import DeploymentState
from domain.lifecycle import Transition

WORKFLOW_NAME = "DeploymentLifecycle"
REGISTER_UPDATE = "register"
# ApplicationError types the workflow's updates fail with.
ILLEGAL = "IllegalTransition"
REFUSED = "ApprovalRefused"
# ApplicationError types of the store activities (non-retryable), inside the update's failure.
# A conflict's details are the deployment as the store holds it, for the workflow to adopt.
CONFLICT = "ConcurrencyConflict"
NOT_FOUND = "DeploymentNotFound"
# A stored license or profile that no longer reads as its model (written before a rule was
# tightened, or by hand): retried, it held the deployment's lock, and every later transition
# waited behind it, for ever.
UNREADABLE = "StoredRecordUnreadable"
# The same, met by a transition reading the deployment's own row: pydantic's error, its type.
ROW_UNREADABLE = "ValidationError"
# What a store activity fails with the same way every time: never retried.
STORE_REFUSALS = (CONFLICT, NOT_FOUND, UNREADABLE, ROW_UNREADABLE, ILLEGAL)

# The workflow update each transition is sent as.
UPDATE_OF: dict[Transition, str] = {
    Transition.RECORD_EVIDENCE: "record_evidence",
    Transition.RECORD_LICENSE: "record_license",
    Transition.APPROVE: "approve",
    Transition.PROBE_FAILED: "probe_failed",
    Transition.PROBE_RECOVERED: "probe_recovered",
    Transition.RETIRE: "retire",
}


# Temporal's SQL visibility keeps ids in VARCHAR(255), and such servers refuse longer ones
# (`limit.maxIDLength`, deploy/temporal/dynamicconfig.yaml): a tenant id of up to 100 characters
# and a deployment id of up to 200 made ids of up to 312, a registration Temporal refused.
WORKFLOW_ID_MAX_LENGTH = 255


def workflow_id(tenant_id: str, deployment_id: str) -> str:
    """The deployment's lifecycle workflow: readable where it fits, else with the deployment
    id's digest in its place (such an id was never accepted, so none running changes)."""
    wid = f"deployment/{tenant_id}/{deployment_id}"
    if len(wid) <= WORKFLOW_ID_MAX_LENGTH:
        return wid
    digest = hashlib.sha256(deployment_id.encode()).hexdigest()[:32]
    return f"deployment/{tenant_id}/sha256:{digest}"


class RegisterCandidateInput(BaseModel):
    tenant_id: str
    registration: DeploymentRegistration


class RegisterCandidateResult(BaseModel):
    created: bool
    deployment: DeploymentRecord


class TransitionInput(BaseModel):
    tenant_id: str
    deployment_id: str
    transition: Transition
    expected_version: int
    # The state the workflow holds the deployment in: a retry tells its own committed write
    # from another's by the state this transition leads to. None in an activity scheduled
    # before it was sent.
    expected_state: DeploymentState | None = None
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
