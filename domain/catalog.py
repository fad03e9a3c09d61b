"""The plain values a catalog snapshot is built from. Whoever reads the store turns rows into
these; `domain.snapshot.CatalogSnapshot` compiles them into lookup indexes."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, model_validator

from domain.deployments import DeploymentRecord
from domain.enums import DeploymentState, PrivacyClass
from domain.policy import TenantPolicy
from domain.pricing import Pricebook
from domain.profiles import ModelProfile

PASS_VERDICT = "pass"  # noqa: S105 (an evaluation verdict, not a secret)
# The verdicts the suite writes: each its measure against the suite's own default threshold.
SUITE_VERDICTS = frozenset({PASS_VERDICT, "fail"})


class CatalogDeployment(BaseModel):
    """A deployment as the planner sees it.

    `context_window_tokens` is not a spec field of ModelDeployment: it comes from the model's
    metadata (provider documentation or the serving pool's configuration, recorded on the
    deployment at registration) and is carried here because the planner must refuse deployments
    whose window cannot hold the profile's context. None means unknown, and an unknown window
    is never assumed to be large enough.
    """

    model_config = ConfigDict(
        frozen=True, validate_by_name=True, validate_by_alias=True, extra="forbid"
    )

    deployment_id: str = Field(alias="deploymentId", min_length=1)
    tenant_id: str = Field(alias="tenantId", min_length=1)
    provider: str
    model: str
    region: str
    privacy_class: PrivacyClass = Field(alias="privacyClass")
    state: DeploymentState
    healthy: bool
    version: int = 1
    compute_pool_id: str | None = Field(default=None, alias="computePoolId")
    context_window_tokens: int | None = Field(default=None, alias="contextWindowTokens", gt=0)
    # The broker reference the adapter resolves (never a credential); the planner ignores it.
    endpoint_ref: str | None = Field(default=None, alias="endpointRef")

    @classmethod
    def from_record(cls, record: DeploymentRecord) -> CatalogDeployment:
        return cls(
            deployment_id=record.deployment_id,
            tenant_id=record.tenant_id,
            provider=record.provider,
            model=record.model,
            region=record.region,
            privacy_class=record.privacy_class,
            state=record.state,
            healthy=record.healthy,
            version=record.version,
            compute_pool_id=record.compute_pool_id,
            context_window_tokens=record.context_window_tokens,
        )


class CapabilityScore(BaseModel):
    """One evaluated capability of one deployment (the spec's CapabilityScore plus its owner).

    A score of None is a pass/fail check without a number: it counts as 1.0 when it passed and
    0.0 when it did not. A verdict the suite never writes (neither pass nor fail) never meets a
    threshold, whatever its score.
    """

    model_config = ConfigDict(
        frozen=True, validate_by_name=True, validate_by_alias=True, extra="forbid"
    )

    tenant_id: str = Field(alias="tenantId", min_length=1)
    deployment_id: str = Field(alias="deploymentId", min_length=1)
    capability: str = Field(min_length=1)
    verdict: str
    score: float | None = Field(default=None, ge=0, le=1)
    evaluated_at: datetime = Field(alias="evaluatedAt")
    suite_version: str = Field(alias="suiteVersion")

    @property
    def passed(self) -> bool:
        return self.verdict.strip().lower() == PASS_VERDICT

    @property
    def measured(self) -> float:
        if self.score is not None:
            return self.score
        return 1.0 if self.passed else 0.0

    def meets(self, threshold: float) -> bool:
        """Whether this evidence meets a profile's threshold: the one rule of the approval gate
        (domain/approval.py) and of routing. What was measured is judged against the profile's
        own threshold; the suite's verdict is its measure against the suite's default (0.8).
        Routing also asked for that verdict: a profile asking 0.7 of a deployment measured at
        0.75 (3 of 4 cases) had it approved, every threshold shown met, and then never routed
        to it ("failed evaluation")."""
        return self.verdict.strip().lower() in SUITE_VERDICTS and meets(self.measured, threshold)


def meets(measured: float, threshold: float) -> bool:
    """A measure against a profile's threshold, for the gate and for routing alike."""
    return measured >= threshold


def below_thresholds(profile: ModelProfile, scores: list[CapabilityScore]) -> list[str]:
    """The profile's required capabilities this evidence does not meet (`CapabilityScore.meets`;
    never measured counts as not met), sorted: what keeps the deployment out of the profile's
    plans whatever its state."""
    found = {s.capability: s for s in scores}
    return [
        capability
        for capability, threshold in sorted(profile.required_capabilities.items())
        if (s := found.get(capability)) is None or not s.meets(float(threshold))
    ]


class DeploymentStats(BaseModel):
    """Recent latency (health probes and invocations) and invocation outcomes of a deployment,
    over whatever window the snapshot builder chose."""

    model_config = ConfigDict(
        frozen=True, validate_by_name=True, validate_by_alias=True, extra="forbid"
    )

    tenant_id: str = Field(alias="tenantId", min_length=1)
    deployment_id: str = Field(alias="deploymentId", min_length=1)
    latency_p50_ms: float | None = Field(default=None, alias="latencyP50Ms", ge=0)
    latency_p95_ms: float | None = Field(default=None, alias="latencyP95Ms", ge=0)
    latency_samples: int = Field(default=0, alias="latencySamples", ge=0)
    attempts: int = Field(default=0, ge=0)
    successes: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _successes_within_attempts(self) -> DeploymentStats:
        if self.successes > self.attempts:
            raise ValueError("successes cannot exceed attempts")
        return self


class PoolState(StrEnum):
    READY = "Ready"
    WARMING = "Warming"
    DRAINING = "Draining"
    OFFLINE = "Offline"


class PoolStatus(BaseModel):
    model_config = ConfigDict(
        frozen=True, validate_by_name=True, validate_by_alias=True, extra="forbid"
    )

    pool_id: str = Field(alias="poolId", min_length=1)
    state: PoolState


class CatalogData(BaseModel):
    """Everything one planner decision may read, as plain serialisable values.

    Deployments, profiles, scores and stats are keyed by (tenant, id) because deployment ids are
    unique only within a tenant. Tenants in `shared_tenant_ids` (the platform catalog) publish
    profiles and deployments every tenant may route to; a tenant's own id wins over a shared one.
    The builder must bump `version` whenever any content changes: decisions record it as the
    name of what they saw.
    """

    model_config = ConfigDict(
        frozen=True, validate_by_name=True, validate_by_alias=True, extra="forbid"
    )

    version: int = Field(ge=0)
    deployments: tuple[CatalogDeployment, ...] = ()
    capability_scores: tuple[CapabilityScore, ...] = Field(default=(), alias="capabilityScores")
    pricebooks: tuple[Pricebook, ...] = ()
    # The tenant's current revision (the one it published last), priced at when a profile's
    # priceBasis names none published; None with a single revision means that one.
    current_pricing_revision: str | None = Field(default=None, alias="currentPricingRevision")
    stats: tuple[DeploymentStats, ...] = ()
    tenant_policies: tuple[TenantPolicy, ...] = Field(default=(), alias="tenantPolicies")
    pools: tuple[PoolStatus, ...] = ()
    profiles: tuple[ModelProfile, ...] = ()
    # (tenant, profile) whose stored versions do not all read: left out of `profiles` whole, so
    # that the profile routes nothing (a refusal saying why) rather than on an older version.
    unreadable_profiles: tuple[tuple[str, str], ...] = Field(default=(), alias="unreadableProfiles")
    shared_tenant_ids: frozenset[str] = Field(default=frozenset(), alias="sharedTenantIds")
