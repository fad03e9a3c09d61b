"""Profile releases arrive as asset events from the registry; activation checks the invariants."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from domain.enums import Capability, LatencyClass, Modality, PrivacyClass
from domain.profiles import ModelProfile, guarantees

_NAME = r"^[a-z0-9][a-z0-9._-]{0,99}$"


class ReleaseStatus(StrEnum):
    PUBLISHED = "Published"
    DRAFT = "Draft"
    DEPRECATED = "Deprecated"
    REVOKED = "Revoked"


class ProfileDefinition(BaseModel):
    """The profile body of a release (tenant and status are added on activation)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    profile_id: str = Field(alias="profileId", pattern=_NAME)
    version: str = Field(pattern=r"^[A-Za-z0-9._-]{1,50}$")
    modality: Modality
    required_capabilities: dict[Capability, Annotated[float, Field(ge=0, le=1)]] = Field(
        alias="requiredCapabilities"
    )
    privacy_class: PrivacyClass = Field(alias="privacyClass")
    latency_class: LatencyClass = Field(alias="latencyClass")
    max_context_tokens: int = Field(alias="maxContextTokens", gt=0, le=10_000_000)
    max_output_tokens: int = Field(alias="maxOutputTokens", gt=0, le=1_000_000)
    allowed_regions: list[str] = Field(alias="allowedRegions", min_length=1, max_length=100)
    allowed_deployments: list[str] = Field(alias="allowedDeployments", max_length=1000)
    fallback_chain: list[str] = Field(default_factory=list, alias="fallbackChain", max_length=20)
    fallback_enabled: bool = Field(default=False, alias="fallbackEnabled")
    embedding_compatibility: str | None = Field(
        default=None, alias="embeddingCompatibility", max_length=200
    )
    price_basis: str = Field(alias="priceBasis", min_length=1, max_length=100)

    @field_validator("allowed_deployments")
    @classmethod
    def _unique_deployments(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("allowedDeployments lists a deployment twice")
        return value

    def to_profile(self, tenant_id: str, release_id: str) -> ModelProfile:
        data = self.model_dump()
        data["required_capabilities"] = {
            str(k.value): v for k, v in self.required_capabilities.items()
        }
        return ModelProfile(tenant_id=tenant_id, release_id=release_id, **data)


class AssetReleasePublished(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    event_type: Literal["AssetReleasePublished"] = Field(alias="eventType")
    release_id: str = Field(alias="releaseId", min_length=1, max_length=200)
    status: ReleaseStatus
    admin_approved: bool = Field(alias="adminApproved")
    profile: ProfileDefinition


class AssetReleaseRetired(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    event_type: Literal["AssetReleaseDeprecated", "AssetReleaseRevoked"] = Field(alias="eventType")
    release_id: str = Field(alias="releaseId", min_length=1, max_length=200)
    profile_id: str = Field(alias="profileId", pattern=_NAME)
    version: str = Field(min_length=1, max_length=50)


AssetEvent = Annotated[
    AssetReleasePublished | AssetReleaseRetired, Field(discriminator="event_type")
]


class Difference(BaseModel):
    """One field a release would change in a version that exists: versions are immutable."""

    field: str  # e.g. "profile.maxOutputTokens", or "releaseId"
    existing: Any = None
    published: Any = None


_UNCOMPARED = frozenset({"tenant_id", "status", "release_id"})


def version_differences(existing: ModelProfile, event: AssetReleasePublished) -> list[Difference]:
    """What the event says differently from the stored version; empty means a replay."""
    incoming = event.profile.to_profile(tenant_id=existing.tenant_id, release_id=event.release_id)
    out = []
    if existing.release_id != event.release_id:
        out.append(
            Difference(field="releaseId", existing=existing.release_id, published=event.release_id)
        )
    for name, info in ModelProfile.model_fields.items():
        if name in _UNCOMPARED:
            continue
        ours, theirs = getattr(existing, name), getattr(incoming, name)
        if ours != theirs:
            out.append(
                Difference(
                    field=f"profile.{info.alias or name}",
                    existing=_plain(ours),
                    published=_plain(theirs),
                )
            )
    return out


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, StrEnum) else value


def activation_refusals(
    event: AssetReleasePublished, find_active: Callable[[str], ModelProfile | None]
) -> list[str]:
    """Why this release may not become active; empty means activate.

    `find_active(profileId)` returns the active profile (latest version) of the same tenant.
    """
    refusals: list[str] = []
    if event.status is not ReleaseStatus.PUBLISHED:
        refusals.append(f"release {event.release_id} is {event.status.value}, not Published")
    if not event.admin_approved:
        refusals.append(f"release {event.release_id} is not approved by a platform admin")
    profile = event.profile.to_profile(tenant_id="-", release_id=event.release_id)
    if profile.fallback_enabled and not profile.fallback_chain:
        refusals.append("fallbackEnabled is true but fallbackChain is empty")
    for fallback_id in profile.fallback_chain:
        if fallback_id == profile.profile_id:
            refusals.append("fallbackChain lists the profile itself")
            continue
        fallback = find_active(fallback_id)
        if fallback is None:
            refusals.append(f"fallback {fallback_id} is not an active profile")
            continue
        refusals.extend(_fallback_refusals(profile, fallback))
    return refusals


def _fallback_refusals(profile: ModelProfile, fallback: ModelProfile) -> list[str]:
    out = []
    name = fallback.profile_id
    if not fallback.privacy_class.at_least_as_strict_as(profile.privacy_class):
        out.append(
            f"fallback {name} has privacy class {fallback.privacy_class.value}, weaker than "
            f"{profile.privacy_class.value}"
        )
    if fallback.modality is not profile.modality:
        out.append(f"fallback {name} is {fallback.modality.value}, not {profile.modality.value}")
    if (
        profile.modality is Modality.EMBEDDING
        and fallback.embedding_compatibility != profile.embedding_compatibility
    ):
        out.append(f"fallback {name} embeds into another space")
    theirs = guarantees(fallback)
    for capability, threshold in guarantees(profile).items():
        if theirs.get(capability, -1.0) < threshold:
            out.append(
                f"fallback {name} does not guarantee {capability} >= {threshold} "
                f"(requires {theirs.get(capability, 'nothing')})"
            )
    return out
