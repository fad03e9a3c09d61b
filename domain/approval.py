"""The approval gate: license terms and capability evidence against every listing profile."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from domain.catalog import meets
from domain.deployments import LicenseMetadata
from domain.profiles import ModelProfile


class IntendedUse(StrEnum):
    COMMERCIAL_USE = "commercialUse"
    REDISTRIBUTION = "redistribution"
    FINE_TUNING = "fineTuning"
    CUSTOMER_DEPLOYMENT = "customerDeployment"


# Serving a model to the platform's tenants is commercial use, always checked; anything more is
# asked for.
DEFAULT_INTENDED_USE: frozenset[IntendedUse] = frozenset({IntendedUse.COMMERCIAL_USE})


class Refusal(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    code: str
    message: str
    profile_id: str | None = Field(default=None, alias="profileId")
    capability: str | None = None
    threshold: float | None = None
    score: float | None = None
    license_term: str | None = Field(default=None, alias="licenseTerm")


def license_refusals(
    license_: LicenseMetadata | None, intended: Iterable[IntendedUse]
) -> list[Refusal]:
    if license_ is None:
        return [Refusal(code="license-missing", message="no license metadata is recorded")]
    terms = license_.model_dump(by_alias=True)
    # Asking for more terms never asks for less: serving is commercial use whatever else the
    # operator names, so a list without it (or an empty one) cannot approve a model whose
    # license forbids commercial use.
    intended = {*intended, *DEFAULT_INTENDED_USE}
    return [
        Refusal(
            code="license-forbids",
            message=f"the license does not permit {use.value}",
            license_term=use.value,
        )
        for use in sorted(intended)
        if not terms.get(use.value, False)
    ]


def evidence_refusals(
    scores: Mapping[str, float], listing_profiles: Iterable[ModelProfile]
) -> list[Refusal]:
    out: list[Refusal] = []
    for profile in sorted(listing_profiles, key=lambda p: (p.profile_id, p.version)):
        for capability, threshold in sorted(profile.required_capabilities.items()):
            score = scores.get(capability)
            if score is None:
                out.append(
                    Refusal(
                        code="no-evidence",
                        message=f"profile {profile.profile_id} requires {capability} "
                        f">= {threshold} but it was never measured",
                        profile_id=profile.profile_id,
                        capability=capability,
                        threshold=threshold,
                    )
                )
            elif not meets(score, threshold):
                out.append(
                    Refusal(
                        code="below-threshold",
                        message=f"profile {profile.profile_id} requires {capability} "
                        f">= {threshold}; measured {score}",
                        profile_id=profile.profile_id,
                        capability=capability,
                        threshold=threshold,
                        score=score,
                    )
                )
    return out


def approval_refusals(
    license_: LicenseMetadata | None,
    intended: Iterable[IntendedUse],
    scores: Mapping[str, float],
    listing_profiles: Iterable[ModelProfile],
) -> list[Refusal]:
    """Every reason the deployment may not be approved; empty means approve."""
    return license_refusals(license_, intended) + evidence_refusals(scores, listing_profiles)
