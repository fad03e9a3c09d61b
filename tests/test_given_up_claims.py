"""Claims a process gave up on during a database stall are still undone as it stops: cancelled
at once, a process stopping in an outage's wake (a rollout just after a failover) left them to
land and be swept, each key then a 409 `invocation-closed` though its caller had been told
nothing was claimed."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

from api.given_up_claims import GivenUpClaims


async def test_a_stopping_process_goes_on_undoing_within_its_bound() -> None:
    attempts: list[int] = []

    async def release(claims: Sequence[tuple[uuid.UUID, datetime]]) -> set[uuid.UUID]:
        attempts.append(len(claims))
        if len(attempts) == 1:
            raise ConnectionError("the store still away")
        return {invocation_id for invocation_id, _ in claims}

    kept = GivenUpClaims(release, window=60.0)
    kept.add(uuid.uuid4(), datetime.now(UTC))
    await kept.aclose(wait=10.0)
    assert attempts == [1, 1] and len(kept) == 0  # failed once, then undone before it stopped


async def test_a_stop_whose_store_stays_away_leaves_them_to_the_sweeper() -> None:
    async def release(claims: Sequence[tuple[uuid.UUID, datetime]]) -> set[uuid.UUID]:
        raise ConnectionError("the store away for good")

    kept = GivenUpClaims(release, window=60.0)
    kept.add(uuid.uuid4(), datetime.now(UTC))
    await kept.aclose(wait=0.1)
    assert len(kept) == 1  # left to the sweeper
