"""The request-independent half of filtering: which of a cohort's deployments a tenant's policy
admits for a data classification. The answer is the same for every request of that tenant and
classification, so it is worked out once per snapshot and remembered in the cohort."""

from __future__ import annotations

from typing import Any

from domain.cohort import Cohort, PolicyKey, RawExclusion
from domain.enums import PrivacyClass
from domain.exclusions import ExclusionCode
from domain.policy import CompiledPolicy, DataClassification, PolicyVerdict

Admission = tuple[tuple[int, ...], tuple[RawExclusion, ...]]


def admit(cohort: Cohort, policy: CompiledPolicy | None, dc: DataClassification) -> Admission:
    """(surviving preference indexes in preference order, exclusions so far). Without a policy
    nothing is admitted: routing fails closed."""
    key = ("admit", policy, dc)
    found = cohort.memo.get(key)
    if found is not None:
        return found
    excluded: list[RawExclusion] = list(cohort.pre_excluded)
    survivors: list[int] = []
    if policy is None:
        excluded.extend((i, ExclusionCode.NO_TENANT_POLICY, {}) for i in cohort.members)
    else:
        verdicts = [policy_exclusion(policy, dc, k) for k in cohort.keys]
        for i in cohort.members:
            # Tenant policy is reported before the profile's own region, threshold and
            # context refusals (see domain.exclusions for the full order).
            v = verdicts[cohort.key_index[i]] or cohort.post[i]
            if v is None:
                survivors.append(i)
            else:
                excluded.append((i, v[0], v[1]))
    result = (tuple(survivors), tuple(excluded))
    cohort.memo[key] = result
    return result


def policy_exclusion(
    policy: CompiledPolicy, dc: DataClassification, key: PolicyKey
) -> tuple[ExclusionCode, dict[str, Any]] | None:
    privacy, provider, region = key
    verdict = policy.verdict(dc, privacy, provider, region)
    if verdict is PolicyVerdict.ALLOW:
        return None
    detail: dict[str, Any] = {"dataClassification": dc.value, "policyRevision": policy.revision}
    if verdict in (PolicyVerdict.PRIVACY_DENIED, PolicyVerdict.CONFIDENTIAL_TO_EXTERNAL):
        detail["privacyClass"] = privacy.value
        detail["allowedPrivacyClasses"] = by_strictness(policy.privacy_classes_for(dc))
    elif verdict is PolicyVerdict.PROVIDER_DENIED:
        detail["provider"] = provider
        detail["listedAsDenied"] = provider in policy.denied_providers
    else:
        detail["region"] = region
        detail["allowedRegions"] = sorted(policy.regions or ())
    return ExclusionCode(verdict.value), detail


def by_strictness(classes: frozenset[PrivacyClass]) -> list[str]:
    return [c.value for c in sorted(classes, key=lambda c: c.strictness)]
