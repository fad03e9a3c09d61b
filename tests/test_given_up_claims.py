"""Claims a process gave up on during a database stall are still undone as it stops: cancelled
at once, a process stopping in an outage's wake (a rollout just after a failover) left them to
land and be swept, each key then a 409 `invocation-closed` though its caller had been told
nothing was claimed. And every claim of a key given up is undone, each by its own start time,
not only the last retry's."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from api import given_up_claims
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


async def test_every_given_up_claim_of_a_key_is_undone_not_only_its_last(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """During a freeze a key's claim is given up, the SDK retries the same key (the same
    invocation id) and that claim is given up too. When the database thaws, the first claim
    lands; the retry's, queued behind it, lands once it is undone. Keyed by id, the retry's
    entry replaced the first, whose receipt then stayed open with no workflow (the key
    `invocation-in-progress` until swept, then spent)."""
    # The loop's own pause between rounds, driven at once: its rounds, not time, are tested.
    monkeypatch.setattr(given_up_claims, "RELEASE_INTERVAL_SECONDS", 0.0)
    invocation = uuid.uuid4()
    first = datetime(2026, 12, 5, 5, 35, 0, tzinfo=UTC)
    retry = first + timedelta(seconds=10)
    landed = {(invocation, first)}  # the thaw: the first claim's insert applied
    asked: list[set[tuple[uuid.UUID, datetime]]] = []
    now = [0.0]

    async def release(claims: Sequence[tuple[uuid.UUID, datetime]]) -> set[uuid.UUID]:
        # The store's statement: each claim deleted only if it is the one in the table.
        asked.append(set(claims))
        undone = landed & set(claims)
        landed.difference_update(undone)
        if (invocation, first) in undone:
            landed.add((invocation, retry))  # the retry's insert, no longer in conflict
        if len(asked) >= 3:
            now[0] = 120.0  # past the window: the next round keeps nothing
        return {invocation_id for invocation_id, _ in undone}

    kept = GivenUpClaims(release, window=60.0, clock=lambda: now[0])
    kept.add(invocation, first)
    kept.add(invocation, retry)
    await kept.aclose(wait=10.0)
    assert asked[0] == {(invocation, first), (invocation, retry)}, asked
    assert landed == set()  # both claims undone: the key free for the caller's next retry
    assert len(kept) == 0


async def test_a_single_claim_undone_is_let_go_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A key given up once, undone once: nothing of it is kept (no statement a second for it
    until the window ends)."""
    monkeypatch.setattr(given_up_claims, "RELEASE_INTERVAL_SECONDS", 0.0)
    rounds: list[int] = []

    async def release(claims: Sequence[tuple[uuid.UUID, datetime]]) -> set[uuid.UUID]:
        rounds.append(len(claims))
        return {invocation_id for invocation_id, _ in claims}

    kept = GivenUpClaims(release, window=60.0)
    kept.add(uuid.uuid4(), datetime.now(UTC))
    kept.add(uuid.uuid4(), datetime.now(UTC))
    await kept.aclose(wait=10.0)
    assert rounds == [2] and len(kept) == 0
