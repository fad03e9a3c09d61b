"""Deployment registration: the value types and the rules a registration must satisfy.

A registration crosses the workflow boundary, so its rules on what a caller may send are edge
rules, skipped for data read back from a history (`domain/stored.py`): one added later must
be written the same way.
"""

from __future__ import annotations

import re
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from domain.enums import DeploymentState, PrivacyClass
from domain.stored import reading_stored

_ID = r"^[A-Za-z0-9][A-Za-z0-9._:/@-]{0,199}$"
# A provider's name, as a deployment registers it: prices (domain/pricing.py) and statement
# files (providers/statements/imports.py) name providers the same way, or match no deployment.
PROVIDER_NAME = r"^[a-z0-9][a-z0-9_-]{0,63}$"
# endpointRef names a secret or connection held by the Secret Broker, e.g. "env:OPENAI_API_KEY"
# or "file:/run/secrets/anthropic" or "pool:tenant-a/vllm". Anything else — a bare key, a URL
# with credentials — is refused so that credentials never reach the database.
_ENDPOINT_REF = re.compile(r"^(env|file|vault|pool|secret|upstream):[A-Za-z0-9._:/@-]{1,300}$")
_CREDENTIAL_SHAPES = (
    re.compile(r"sk-[A-Za-z0-9_-]{8,}"),
    re.compile(r"sk-ant-[A-Za-z0-9_-]{8,}"),
    re.compile(r"(?i)bearer\s+\S+"),
    re.compile(r"://[^/\s:@]+:[^/\s@]+@"),
)


class LicenseMetadata(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    commercial_use: bool = Field(alias="commercialUse")
    redistribution: bool = Field(default=False, alias="redistribution")
    fine_tuning: bool = Field(default=False, alias="fineTuning")
    customer_deployment: bool = Field(default=False, alias="customerDeployment")
    license_name: str | None = Field(default=None, alias="licenseName", max_length=200)


UNADDRESSABLE = "deploymentId segments between '/' must not be empty, '.' or '..'"


def addressable(deployment_id: str) -> bool:
    """Whether the id names the same deployment once in a URL path
    (`/factory/model-deployments/{id}/retire`): a `.` or `..` segment is resolved away by HTTP
    clients (httpx, browsers, curl), so `team/../prod/retire` reached `prod`'s retire, and an
    empty one is collapsed by many proxies the same way."""
    return not any(part in ("", ".", "..") for part in deployment_id.split("/"))


def looks_like_credential(value: str) -> bool:
    return any(p.search(value) for p in _CREDENTIAL_SHAPES)


class DeploymentRegistration(BaseModel):
    """What an operator posts to register a Candidate."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, str_strip_whitespace=True)

    deployment_id: str = Field(alias="deploymentId", pattern=_ID)
    provider: str = Field(pattern=PROVIDER_NAME)
    model: str = Field(min_length=1, max_length=200)
    region: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
    privacy_class: PrivacyClass = Field(alias="privacyClass")
    endpoint_ref: str = Field(alias="endpointRef", min_length=1, max_length=400)
    compute_pool_id: str | None = Field(default=None, alias="computePoolId", max_length=200)
    license_metadata: LicenseMetadata | None = Field(default=None, alias="licenseMetadata")
    # Not a spec field: the model's context window, so the router can refuse requests it cannot
    # hold. Unknown (absent) is never assumed to be large enough.
    context_window_tokens: int | None = Field(
        default=None, alias="contextWindowTokens", gt=0, le=100_000_000
    )

    # Both rules below are edge rules: the registration crosses the workflow boundary (the
    # lifecycle's start input, register_candidate's), and a history recorded before a rule was
    # tightened must still replay (`domain/stored.py`), so they skip data read back from one.
    # A lifecycle registered as "team/x/" before the path rule was added otherwise failed every
    # workflow task, and could not even be retired. The API's bodies keep both rules.
    @field_validator("deployment_id")
    @classmethod
    def _deployment_id_is_a_path(cls, value: str, info: ValidationInfo) -> str:
        if not reading_stored(info) and not addressable(value):
            raise ValueError(UNADDRESSABLE)
        return value

    @field_validator("endpoint_ref")
    @classmethod
    def _endpoint_ref_is_a_reference(cls, value: str, info: ValidationInfo) -> str:
        if reading_stored(info):
            return value
        if looks_like_credential(value) or not _ENDPOINT_REF.match(value):
            raise ValueError(
                "endpointRef must reference a brokered secret or pool "
                "(env:, file:, vault:, pool:, secret: or upstream:), never carry a credential"
            )
        return value


class DeploymentRecord(BaseModel):
    """A deployment as the catalog holds it (passed across the workflow boundary)."""

    model_config = ConfigDict(populate_by_name=True)

    deployment_id: str = Field(alias="deploymentId")
    tenant_id: str = Field(alias="tenantId")
    provider: str
    model: str
    region: str
    privacy_class: PrivacyClass = Field(alias="privacyClass")
    endpoint_ref: str = Field(alias="endpointRef")
    compute_pool_id: str | None = Field(default=None, alias="computePoolId")
    capability_evidence_ref: str | None = Field(default=None, alias="capabilityEvidenceRef")
    license_metadata: LicenseMetadata | None = Field(default=None, alias="licenseMetadata")
    state: DeploymentState
    healthy: bool
    version: int
    context_window_tokens: int | None = Field(default=None, alias="contextWindowTokens")


class CapabilityMeasurement(BaseModel):
    score: float = Field(ge=0, le=1)
    verdict: str


class EvidenceInput(BaseModel):
    """An evaluation record's outcome, as the evidence importer hands it over."""

    evidence_ref: str
    suite_version: str
    evaluated_at: datetime
    scores: dict[str, CapabilityMeasurement]


# What a registration sets for good. The license is left out: it may be recorded again before
# approval (PUT …/license).
_REGISTERED_FIELDS = (
    "provider",
    "model",
    "region",
    "privacy_class",
    "endpoint_ref",
    "compute_pool_id",
    "context_window_tokens",
)


def registered_as(registration: DeploymentRegistration, record: DeploymentRecord) -> bool:
    """Whether `record` is the deployment `registration` would register (its license aside)."""
    return all(getattr(registration, f) == getattr(record, f) for f in _REGISTERED_FIELDS)
