"""ModelProfile: the published, versioned set of requirements callers ask for by name."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from domain.enums import LatencyClass, Modality, PrivacyClass, ProfileStatus


class ModelProfile(BaseModel):
    model_config = ConfigDict(populate_by_name=True, from_attributes=True)

    profile_id: str = Field(alias="profileId")
    version: str
    release_id: str = Field(alias="releaseId")
    tenant_id: str = Field(alias="tenantId")
    modality: Modality
    required_capabilities: dict[str, float] = Field(alias="requiredCapabilities")
    privacy_class: PrivacyClass = Field(alias="privacyClass")
    latency_class: LatencyClass = Field(alias="latencyClass")
    max_context_tokens: int = Field(alias="maxContextTokens")
    max_output_tokens: int = Field(alias="maxOutputTokens")
    allowed_regions: list[str] = Field(alias="allowedRegions")
    allowed_deployments: list[str] = Field(alias="allowedDeployments")
    fallback_chain: list[str] = Field(alias="fallbackChain")
    fallback_enabled: bool = Field(alias="fallbackEnabled")
    embedding_compatibility: str | None = Field(default=None, alias="embeddingCompatibility")
    price_basis: str = Field(alias="priceBasis")
    status: ProfileStatus = ProfileStatus.ACTIVE


def version_order(version: str) -> tuple[tuple[tuple[int, int | str], ...], str]:
    """How a profile's versions order, newest last, wherever the newest is chosen (the API's
    lists, and routing's snapshot): dotted parts compare as numbers where they are numbers,
    so 1.10 is newer than 1.9 (as text it was older, and routing pinned new runs on 1.9
    while the API listed 1.10 as current). The text itself breaks a tie of equal parts
    ("1.0" and "1-0", "01" and "1"), which each reader otherwise settled in an order of its
    own."""
    parts = version.replace("-", ".").split(".")
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in parts), version


# The guarantees a fallback must keep: a fallback that drops tool calling or structured output
# would break the caller in ways a retry cannot fix.
GUARANTEE_CAPABILITIES: tuple[str, ...] = (
    "tool-calling",
    "parallel-tool-calling",
    "strict-json",
    "json-schema",
)


def guarantees(profile: ModelProfile) -> dict[str, float]:
    return {c: t for c, t in profile.required_capabilities.items() if c in GUARANTEE_CAPABILITIES}
