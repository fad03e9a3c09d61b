"""Why a fallback-chain entry may stand in for its profile, in words: the activation rule of
`domain/profile_releases.py` (privacy at least as strict, same modality and embedding space, at
least the same guarantees) read as reasons, or its refusals when the entry no longer holds."""

from __future__ import annotations

from dataclasses import dataclass

from domain.enums import Modality
from domain.profile_releases import _fallback_refusals
from domain.profiles import ModelProfile, guarantees


@dataclass(frozen=True)
class Equivalence:
    holds: bool
    notes: list[str]


def equivalence(profile: ModelProfile, fallback: ModelProfile | None) -> Equivalence:
    if fallback is None:
        return Equivalence(False, ["not an active profile: the chain skips it"])
    refusals = _fallback_refusals(profile, fallback)
    if refusals:
        return Equivalence(False, refusals)
    notes = [
        f"privacy {fallback.privacy_class.value} is at least as strict as "
        f"{profile.privacy_class.value}",
        f"same modality ({fallback.modality.value})",
    ]
    if profile.modality is Modality.EMBEDDING:
        notes.append(f"same embedding space ({fallback.embedding_compatibility})")
    theirs = guarantees(fallback)
    for capability, threshold in sorted(guarantees(profile).items()):
        notes.append(f"guarantees {capability} >= {theirs[capability]} (needs {threshold})")
    return Equivalence(True, notes)
