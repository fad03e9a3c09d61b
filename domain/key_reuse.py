"""Whether a used Idempotency-Key's receipt is this call's to replay. Keys are the tenant's: a
key replays only for the same request, from the same run and project. Another run's key with
the same body was answered with that call's answer, its receipt and cost on the other run and
none on this one. The attempt may differ: a runtime's retry of a step is the same call."""

from __future__ import annotations

import uuid


def reuse_refusal(
    seen: tuple[str, uuid.UUID | None, str], asked: tuple[str, uuid.UUID | None, str]
) -> str | None:
    """Why the key's receipt (request hash, run, project) is not the asking call's to replay,
    or None when it is."""
    if seen[0] != asked[0]:
        return "This Idempotency-Key was used with a different request."
    if seen[1:] != asked[1:]:
        return "This Idempotency-Key was used by another run or project of this tenant."
    return None
