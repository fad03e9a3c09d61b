"""Response shapes that add read-side summaries to domain records."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from api.evaluations import EvaluationView
from domain.approval import IntendedUse
from domain.deployments import DeploymentRecord
from domain.profiles import ModelProfile


class CapabilityEvidence(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    score: float | None
    verdict: str
    evaluated_at: datetime = Field(alias="evaluatedAt")
    suite_version: str = Field(alias="suiteVersion")


class EvidenceSummary(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    evidence_ref: str | None = Field(alias="evidenceRef")
    capabilities: dict[str, CapabilityEvidence]


class DeploymentView(DeploymentRecord):
    evidence: EvidenceSummary
    evaluation: EvaluationView | None = Field(
        default=None, description="The latest evaluation (on a single deployment's GET)"
    )


class ExclusionView(BaseModel):
    code: str
    reason: str


class AllowedDeployment(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    deployment_id: str = Field(alias="deploymentId")
    registered: bool
    state: str | None = None
    healthy: bool | None = None
    routable: bool = Field(
        default=False,
        description="No filter of this profile version leaves it out whatever the call (state, "
        "health, pool, privacy floor, regions, thresholds, context window); the tenant policy, "
        "the call's data, needs and budget decide the rest: the route-plan preview",
    )
    exclusion: ExclusionView | None = Field(
        default=None, description="Why it is not routable for this profile, when it is not"
    )
    below_thresholds: list[str] = Field(
        default_factory=list,
        alias="belowThresholds",
        description="The profile's required capabilities its current evidence does not meet "
        "(never measured, below the threshold, or a verdict the suite never writes)",
    )
    evidence: EvidenceSummary | None = None


class ProfileDetail(ModelProfile):
    deployments: list[AllowedDeployment]


class ApproveBody(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    intended_use: list[IntendedUse] = Field(
        default_factory=lambda: [IntendedUse.COMMERCIAL_USE],
        alias="intendedUse",
        description="License terms the approval must be permitted by, besides commercialUse, "
        "which is always checked.",
    )
