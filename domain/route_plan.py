"""What a routing decision produces.

`RoutePlanDecision` is the planner's in-memory result: the ordered candidate ids, scores, the
constraints, and the decision record's identifiers, with per-candidate and per-exclusion detail
kept in raw form. `to_result()` turns it into `RoutePlanResult`, the pydantic model that crosses
the Temporal boundary and is the body of the route-plan preview. Building a thousand pydantic
objects costs more than the decision itself, and ResolveRoutePlan needs only the ids, the
constraints and the decision id, so that cost is paid only by whoever asks for the detail.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from domain.cohort import Cohort, RawExclusion
from domain.enums import PrivacyClass
from domain.exclusions import ExclusionCode, describe
from domain.policy import DataClassification
from domain.scoring import Weights, ratio_term


class PlanConstraints(BaseModel):
    """What every candidate of the plan satisfies (and every fallback must too)."""

    model_config = ConfigDict(
        frozen=True, validate_by_name=True, validate_by_alias=True, serialize_by_alias=True
    )

    # The weakest privacy class among those allowed; `allowed_privacy_classes` is exact.
    privacy_class: PrivacyClass = Field(alias="privacyClass")
    allowed_privacy_classes: tuple[PrivacyClass, ...] = Field(alias="allowedPrivacyClasses")
    data_classification: DataClassification = Field(alias="dataClassification")
    # None: no regional restriction from profile or tenant policy.
    regions: tuple[str, ...] | None
    # "strict": every candidate passed tool-calling evaluation at the threshold listed in
    # `capabilities`; "none": no tool guarantee.
    tools: Literal["strict", "none"]
    # True: every candidate passed strict-json or json-schema evaluation.
    structured_output: bool = Field(alias="structuredOutput")
    context_tokens: int = Field(alias="contextTokens")
    capabilities: dict[str, float]


class ScoreTerms(BaseModel):
    model_config = ConfigDict(
        frozen=True, validate_by_name=True, validate_by_alias=True, serialize_by_alias=True
    )

    capability: float
    cost: float
    latency: float
    history: float


class Candidate(BaseModel):
    model_config = ConfigDict(
        frozen=True, validate_by_name=True, validate_by_alias=True, serialize_by_alias=True
    )

    deployment_id: str = Field(alias="deploymentId")
    rank: int
    score: float
    kept: bool = True
    terms: ScoreTerms


class Exclusion(BaseModel):
    model_config = ConfigDict(
        frozen=True, validate_by_name=True, validate_by_alias=True, serialize_by_alias=True
    )

    deployment_id: str = Field(alias="deploymentId")
    code: ExclusionCode
    reason: str
    detail: dict[str, Any]


class RoutePlanResult(BaseModel):
    """The decision record: the preview body, and what ResolveRoutePlan persists."""

    model_config = ConfigDict(
        frozen=True, validate_by_name=True, validate_by_alias=True, serialize_by_alias=True
    )

    tenant_id: str = Field(alias="tenantId")
    profile_id: str = Field(alias="profileId")
    profile_version: str = Field(alias="profileVersion")
    constraints: PlanConstraints
    candidates: tuple[Candidate, ...]
    excluded: tuple[Exclusion, ...]
    snapshot_version: int = Field(alias="snapshotVersion")
    policy_revision: str = Field(alias="policyRevision")
    policy_decision_id: uuid.UUID = Field(alias="policyDecisionId")
    pricing_revision: str | None = Field(alias="pricingRevision")
    weights: Weights
    resolved_at: datetime = Field(alias="resolvedAt")

    @property
    def candidate_ids(self) -> list[str]:
        return [c.deployment_id for c in self.candidates]


class RoutePlanDecision:
    """The planner's result. Immutable by convention (read-only attributes, tuples)."""

    __slots__ = (
        "_bests",
        "_cohort",
        "_costs",
        "_exclusions",
        "_order",
        "_scores",
        "_survivors",
        "candidate_ids",
        "constraints",
        "policy_decision_id",
        "policy_revision",
        "pricing_revision",
        "resolved_at",
        "snapshot_version",
        "tenant_id",
        "weights",
    )

    def __init__(
        self,
        *,
        cohort: Cohort,
        tenant_id: str,
        constraints: PlanConstraints,
        survivors: Sequence[int],
        order: list[int],
        scores: list[float],
        costs: list[float],
        bests: tuple[float, float],
        exclusions: list[RawExclusion],
        snapshot_version: int,
        policy_revision: str,
        policy_decision_id: uuid.UUID,
        weights: Weights,
        resolved_at: datetime,
    ) -> None:
        self._cohort = cohort
        self._survivors = survivors
        self._order = order
        self._scores = scores
        self._costs = costs
        self._bests = bests
        self._exclusions = exclusions
        ids = cohort.ids
        self.candidate_ids: tuple[str, ...] = tuple([ids[survivors[j]] for j in order])
        self.tenant_id = tenant_id
        self.constraints = constraints
        self.snapshot_version = snapshot_version
        self.policy_revision = policy_revision
        self.policy_decision_id = policy_decision_id
        self.pricing_revision = cohort.pricing_revision
        self.weights = weights
        self.resolved_at = resolved_at

    def __repr__(self) -> str:
        return (
            f"RoutePlanDecision({self.profile_id}@{self.profile_version}, "
            f"candidates={list(self.candidate_ids)}, excluded={len(self._exclusions)}, "
            f"snapshot={self.snapshot_version}, policy={self.policy_revision})"
        )

    @property
    def profile_id(self) -> str:
        return self._cohort.profile.profile_id

    @property
    def profile_version(self) -> str:
        return self._cohort.profile.version

    @property
    def scores(self) -> tuple[float, ...]:
        """Aligned with candidate_ids."""
        return tuple([self._scores[j] for j in self._order])

    @property
    def routable(self) -> bool:
        return bool(self.candidate_ids)

    @property
    def excluded_ids(self) -> tuple[str, ...]:
        ids = self._cohort.ids
        return tuple(ids[i] for i, _, _ in sorted(self._exclusions, key=lambda x: x[0]))

    def exclusions(self) -> tuple[Exclusion, ...]:
        """In the profile's preference order."""
        ids = self._cohort.ids
        return tuple(
            Exclusion(deployment_id=ids[i], code=code, reason=describe(code, d), detail=dict(d))
            for i, code, d in sorted(self._exclusions, key=lambda x: x[0])
        )

    def terms(self) -> tuple[ScoreTerms, ...]:
        """Each candidate's score terms, aligned with candidate_ids."""
        c = self._cohort
        cost_best, lat_best = self._bests
        out = []
        for j in self._order:
            i = self._survivors[j]
            out.append(
                ScoreTerms(
                    capability=c.cap_mean[i],
                    cost=ratio_term(self._costs[i], cost_best),
                    latency=ratio_term(c.latency_log[i], lat_best),
                    history=c.history[i],
                )
            )
        return tuple(out)

    def candidates(self) -> tuple[Candidate, ...]:
        return tuple(
            Candidate(deployment_id=dep_id, rank=rank, score=score, terms=terms)
            for rank, (dep_id, score, terms) in enumerate(
                zip(self.candidate_ids, self.scores, self.terms(), strict=True), start=1
            )
        )

    def to_result(self) -> RoutePlanResult:
        return RoutePlanResult(
            tenant_id=self.tenant_id,
            profile_id=self.profile_id,
            profile_version=self.profile_version,
            constraints=self.constraints,
            candidates=self.candidates(),
            excluded=self.exclusions(),
            snapshot_version=self.snapshot_version,
            policy_revision=self.policy_revision,
            policy_decision_id=self.policy_decision_id,
            pricing_revision=self.pricing_revision,
            weights=self.weights,
            resolved_at=self.resolved_at,
        )
