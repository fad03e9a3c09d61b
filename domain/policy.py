"""Tenant routing policy as data, compiled once per revision and evaluated in-process.

Why not a policy engine (Cedar via cedarpy): the rules are a handful of set-membership tests on
four attributes, and the planner asks them of every candidate. A Cedar call per candidate costs
microseconds of entity serialisation alone, which a 1,000-deployment plan cannot afford inside
its 1 ms budget; compiled frozensets answer in tens of nanoseconds. The policy stays data (it
could be authored as Cedar later and compiled to this form), has a revision, and every decision
records that revision and a deterministic decision id.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, model_validator

from domain.enums import PrivacyClass


class DataClassification(StrEnum):
    """How sensitive the data a request carries is; ordered from least to most sensitive."""

    PUBLIC = "Public"
    INTERNAL = "Internal"
    CONFIDENTIAL = "Confidential"
    RESTRICTED = "Restricted"

    @property
    def is_confidential(self) -> bool:
        return self in (DataClassification.CONFIDENTIAL, DataClassification.RESTRICTED)

    def more_sensitive_than(self, other: DataClassification) -> bool:
        return _LEVEL[self] > _LEVEL[other]


_LEVEL = {dc: level for level, dc in enumerate(DataClassification)}


class TenantPolicy(BaseModel):
    """What a tenant lets the router do with its data.

    A data classification missing from `allowed_privacy_classes` allows nothing: policy fails
    closed. `allowed_regions` / `allowed_providers` of None mean "no restriction"; an empty list
    means "none". A provider that is both allowed and denied is denied.
    """

    model_config = ConfigDict(
        frozen=True, validate_by_name=True, validate_by_alias=True, extra="forbid"
    )

    tenant_id: str = Field(alias="tenantId", min_length=1)
    revision: str = Field(min_length=1)
    allowed_privacy_classes: dict[DataClassification, frozenset[PrivacyClass]] = Field(
        alias="allowedPrivacyClasses"
    )
    allowed_regions: frozenset[str] | None = Field(default=None, alias="allowedRegions")
    allowed_providers: frozenset[str] | None = Field(default=None, alias="allowedProviders")
    denied_providers: frozenset[str] = Field(default=frozenset(), alias="deniedProviders")
    external_may_see_confidential: bool = Field(default=False, alias="externalMaySeeConfidential")

    @model_validator(mode="after")
    def _has_some_rule(self) -> TenantPolicy:
        if not self.allowed_privacy_classes:
            raise ValueError("a tenant policy must allow privacy classes for some classification")
        return self

    def compile(self) -> CompiledPolicy:
        return CompiledPolicy(self)


class PolicyVerdict(StrEnum):
    ALLOW = "allow"
    PRIVACY_DENIED = "privacy_denied_by_policy"
    CONFIDENTIAL_TO_EXTERNAL = "confidential_to_external_denied"
    PROVIDER_DENIED = "provider_denied"
    REGION_DENIED = "region_denied_by_policy"


class CompiledPolicy:
    """A TenantPolicy reduced to frozensets; immutable and safe to share between threads."""

    __slots__ = (
        "_listed",
        "_privacy",
        "denied_providers",
        "external_may_see_confidential",
        "providers",
        "regions",
        "revision",
        "source",
        "tenant_id",
    )

    def __init__(self, policy: TenantPolicy) -> None:
        self.source = policy
        self.tenant_id = policy.tenant_id
        self.revision = policy.revision
        self._privacy: dict[DataClassification, frozenset[PrivacyClass]] = {}
        self._listed: dict[DataClassification, frozenset[PrivacyClass]] = {}
        for dc in DataClassification:
            allowed = frozenset(policy.allowed_privacy_classes.get(dc, frozenset()))
            self._listed[dc] = allowed
            if dc.is_confidential and not policy.external_may_see_confidential:
                # The flag is a backstop: a matrix that lists External for Confidential data by
                # mistake still cannot send that data to an external provider.
                allowed = allowed - {PrivacyClass.EXTERNAL}
            self._privacy[dc] = frozenset(allowed)
        self.regions = policy.allowed_regions
        self.providers = policy.allowed_providers
        self.denied_providers = policy.denied_providers
        self.external_may_see_confidential = policy.external_may_see_confidential

    def privacy_classes_for(self, dc: DataClassification) -> frozenset[PrivacyClass]:
        return self._privacy[dc]

    def verdict(
        self, dc: DataClassification, privacy: PrivacyClass, provider: str, region: str
    ) -> PolicyVerdict:
        """The first rule that refuses, in a fixed order, so the reported reason is stable."""
        if privacy not in self._privacy[dc]:
            if privacy in self._listed[dc]:
                # Only the confidential-data backstop can refuse a listed class.
                return PolicyVerdict.CONFIDENTIAL_TO_EXTERNAL
            return PolicyVerdict.PRIVACY_DENIED
        if provider in self.denied_providers or (
            self.providers is not None and provider not in self.providers
        ):
            return PolicyVerdict.PROVIDER_DENIED
        if self.regions is not None and region not in self.regions:
            return PolicyVerdict.REGION_DENIED
        return PolicyVerdict.ALLOW


def baseline_policy(tenant_id: str, revision: str = "baseline-1") -> TenantPolicy:
    """A conservative starting policy for a tenant that has not written its own.

    Public and Internal data may go anywhere; Confidential data only to Confidential or Local
    deployments; Restricted data only to Local ones; external providers never see confidential
    data. Any region, any provider. The planner itself never invents a policy: a tenant with none
    in the snapshot gets no candidates, so whoever builds the snapshot opts in to this explicitly.
    """
    every = frozenset(PrivacyClass)
    return TenantPolicy(
        tenant_id=tenant_id,
        revision=revision,
        allowed_privacy_classes={
            DataClassification.PUBLIC: every,
            DataClassification.INTERNAL: every,
            DataClassification.CONFIDENTIAL: frozenset(
                {PrivacyClass.CONFIDENTIAL, PrivacyClass.LOCAL}
            ),
            DataClassification.RESTRICTED: frozenset({PrivacyClass.LOCAL}),
        },
    )
