"""The receipt sweeper's prunes. A prune failing the same way every time (the artifact volume
read-only on a worker, a store that refuses the prune's statement) is given a few attempts,
named by type in the run's report and left to the next run: retried until the run's 10 minute
timeout, it held the run, and under the schedule's SKIP overlap the sweeps of the nine ticks
between were dropped. And the stored answers' folders a run purges cover the minutes whose ticks
were skipped (a cursor on the artifact volume): by the run's minute alone, runs every other
minute purged only the even folders, and half the answers were never deleted."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment
from temporalio.worker import Worker

from activities.sweeper import SweeperActivities
from domain.enums import UsageStatus
from domain.sweep import ARTIFACT_SLOTS, PruneArtifactsInput, SweepInput, artifact_slots
from store.artifacts import PURGE_CURSOR, ArtifactStore
from store.db import create_engine, session_factory
from tests.helpers.deadline import UNBOUNDED
from tests.helpers.receipts import add_receipt, receipts
from workflows.receipt_sweeper import ReceiptSweeperWorkflow

DAY = 86_400.0
# Where the refused delete's error points: it must reach neither the history nor the report.
PATH_MARK = "path-of-an-answer"


class ReadOnlyVolume(ArtifactStore):
    """The artifact volume mounted read-only on this worker: every purge refused, the same way
    every time."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.purges = 0

    def purge_slot(self, slot: str, max_age_seconds: float) -> int:
        self.purges += 1
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self.root / slot / PATH_MARK))


class Recording(ArtifactStore):
    """The folders purged, in order."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.purged: list[str] = []

    def purge_slot(self, slot: str, max_age_seconds: float) -> int:
        self.purged.append(slot)
        return super().purge_slot(slot, max_age_seconds)


@pytest.fixture
async def unmigrated(tmp_path: Path) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    """A store without the run events' table: the prune's statement fails every time."""
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path}/unmigrated.db")
    try:
        yield session_factory(engine)
    finally:
        await engine.dispose()


async def test_prunes_failing_every_time_leave_the_sweep_and_the_run_to_complete(
    temporal_client: Client,
    sessions: async_sessionmaker[AsyncSession],
    unmigrated: async_sessionmaker[AsyncSession],
    tenant: str,
    tmp_path: Path,
) -> None:
    lost = await add_receipt(
        sessions,
        tenant=tenant,
        deployment_id="prunes/dep",
        started_at=datetime.now(UTC) - timedelta(hours=1),
        usage_status=UsageStatus.UNKNOWN,
        open_=True,
    )
    volume = ReadOnlyVolume(tmp_path)
    sweeping = SweeperActivities(sessions)
    failing = SweeperActivities(unmigrated, volume)
    queue = f"prunes-{uuid.uuid4().hex[:8]}"
    worker = Worker(
        temporal_client,
        task_queue=queue,
        workflows=[ReceiptSweeperWorkflow],
        activities=[sweeping.sweep, failing.prune, failing.prune_artifacts],
    )
    async with worker:
        handle = await temporal_client.start_workflow(
            ReceiptSweeperWorkflow.run,
            SweepInput(
                open_longer_than_seconds=600,
                run_event_retention_days=30,
                artifact_retention_days=30,
            ),
            id=f"prunes-test-{uuid.uuid4().hex[:8]}",
            task_queue=queue,
            # The schedule's own bound: only the test's wait below may end it sooner.
            execution_timeout=timedelta(minutes=10),
        )
        try:
            # A few attempts of each, a second or two apart; retried without end, the run
            # ended only at its timeout.
            report = await asyncio.wait_for(handle.result(), UNBOUNDED)
        finally:
            if not (await handle.describe()).close_time:
                await handle.terminate()
        history = (await handle.fetch_history()).to_json()

    assert report.prune_failures == [
        "prune_run_events: OperationalError",
        "prune_artifacts: OSError",
    ]
    assert (report.events_pruned, report.artifacts_pruned) == (0, 0)
    assert volume.purges == 3  # its attempts, bounded
    # The receipt past its budget was closed by this same run.
    row = (await receipts(sessions, [lost]))[lost]
    assert (row.outcome, row.close_reason) == ("Failed", "swept")
    assert report.closed >= 1
    # The failures went by type: neither the answer's path nor the statement reached Temporal.
    assert PATH_MARK not in history and "[SQL:" not in history


async def test_a_refused_prune_is_logged_and_raised_by_its_type_alone(
    sessions: async_sessionmaker[AsyncSession],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    acts = SweeperActivities(sessions, ReadOnlyVolume(tmp_path))
    data = PruneArtifactsInput(retention_days=30, slots=["ab"])
    with (
        caplog.at_level(logging.WARNING, logger="model_router.sweeper"),
        pytest.raises(ApplicationError) as raised,
    ):
        await ActivityEnvironment().run(acts.prune_artifacts, data)
    assert raised.value.type == "OSError"
    assert PATH_MARK not in str(raised.value) and raised.value.__cause__ is None
    assert "prune_artifacts failed" in caplog.text and "OSError (EROFS)" in caplog.text
    assert PATH_MARK not in caplog.text


# The cursor on the artifact volume (store/artifacts.py purge_since).


def _old_answer_in_every_folder(store: ArtifactStore, tenant: str) -> list[Path]:
    paths = []
    then = time.time() - 40 * DAY
    for n in range(ARTIFACT_SLOTS):
        digest = f"{n:02x}{0:062x}"
        store.write(tenant, f"sha256:{digest}", b"an old answer")
        path = store.root / tenant / digest[:2] / digest
        os.utime(path, (then, then))
        paths.append(path)
    return paths


def _cursor(root: Path) -> int:
    return int((root / PURGE_CURSOR).read_text())


def _run(store: ArtifactStore, minute: int, slots: Sequence[str] | None = None) -> int:
    return store.purge_since(artifact_slots(minute) if slots is None else slots, minute, 30 * DAY)


def test_runs_every_other_minute_purge_every_folder(tmp_path: Path) -> None:
    """Runs of 60-120 s under SKIP start every other minute: by their minute alone, only the
    even folders were purged (128 of 256), and the odd ones' answers kept for ever."""
    store = Recording(tmp_path)
    paths = _old_answer_in_every_folder(store, "t-1")
    for minute in range(0, 512, 2):
        _run(store, minute)
    assert not [p for p in paths if p.exists()]
    assert set(store.purged) == {f"{n:02x}" for n in range(ARTIFACT_SLOTS)}
    # Each folder once a round (the 256 minutes), not again for every run.
    assert len(store.purged) == 2 * ARTIFACT_SLOTS - 1
    assert _cursor(tmp_path) == 510


def test_a_gap_longer_than_the_round_purges_every_folder_once(tmp_path: Path) -> None:
    store = Recording(tmp_path)
    _old_answer_in_every_folder(store, "t-1")
    _run(store, 10)
    store.purged.clear()
    assert _run(store, 10 + 300) == ARTIFACT_SLOTS - 1  # the 10th minute's went in its run
    assert sorted(store.purged) == [f"{n:02x}" for n in range(ARTIFACT_SLOTS)]
    assert _cursor(tmp_path) == 310


def test_the_first_run_purges_its_own_folders_and_starts_the_cursor(tmp_path: Path) -> None:
    store = Recording(tmp_path)
    _old_answer_in_every_folder(store, "t-1")
    assert _run(store, 100, ["64", "65"]) == 2
    assert store.purged == ["64", "65"] and _cursor(tmp_path) == 100
    store.purged.clear()
    _run(store, 103)
    assert store.purged == ["65", "66", "67"]  # the minutes since; its own among them


@pytest.mark.parametrize("cursor", [b"", b"not a minute", b"-5\n", b"99999999999\n", b"\xff\xfe"])
def test_a_cursor_unreadable_or_ahead_falls_back_to_the_runs_own_folders(
    tmp_path: Path, cursor: bytes
) -> None:
    store = Recording(tmp_path)
    (tmp_path / PURGE_CURSOR).write_bytes(cursor)
    _run(store, 100)
    assert store.purged == ["64"] and _cursor(tmp_path) == 100


def test_a_run_cut_short_keeps_the_folders_it_did(tmp_path: Path) -> None:
    class Refusing(Recording):
        def purge_slot(self, slot: str, max_age_seconds: float) -> int:
            if slot == "0c":
                raise OSError(errno.EIO, "I/O error")
            return super().purge_slot(slot, max_age_seconds)

    store = Refusing(tmp_path)
    _run(store, 9)
    with pytest.raises(OSError):
        _run(store, 20)
    assert store.purged == ["09", "0a", "0b"] and _cursor(tmp_path) == 11
    store.purged.clear()
    with pytest.raises(OSError):
        _run(store, 21)  # the next run goes on from there (and fails at the same folder)
    assert store.purged == [] and _cursor(tmp_path) == 11


def test_the_cursor_is_not_taken_for_a_tenant(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    paths = _old_answer_in_every_folder(store, "t-1")
    _run(store, 1)
    assert (tmp_path / PURGE_CURSOR).is_file()
    assert sum(store.purge_slot(f"{n:02x}", 30 * DAY) for n in range(ARTIFACT_SLOTS)) == 255
    assert not [p for p in paths if p.exists()]
    assert not [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name]


async def test_the_prune_activity_purges_the_minutes_since_its_last_run(
    sessions: async_sessionmaker[AsyncSession], tmp_path: Path
) -> None:
    store = ArtifactStore(tmp_path)
    paths = _old_answer_in_every_folder(store, "t-1")
    before = int(time.time() // 60)
    (tmp_path / PURGE_CURSOR).write_text(f"{before - 5}\n")
    acts = SweeperActivities(sessions, store)
    data = PruneArtifactsInput(retention_days=30, slots=artifact_slots(before))
    pruned = await ActivityEnvironment().run(acts.prune_artifacts, data)
    after = int(time.time() // 60)  # a minute may begin meanwhile
    gone = {n for n, p in enumerate(paths) if not p.exists()}
    assert {m % ARTIFACT_SLOTS for m in range(before - 4, before + 1)} <= gone
    assert gone <= {m % ARTIFACT_SLOTS for m in range(before - 4, after + 1)}
    assert pruned == len(gone) and before <= _cursor(tmp_path) <= after


def test_the_minutes_behind_stop_at_the_budget_and_the_next_run_goes_on(tmp_path: Path) -> None:
    """Unbounded, the first run after an outage of hours walked the whole volume in one attempt
    (a network share with millions of answers: tens of minutes), past the attempt's 5 minutes
    and the run's 10. Each folder here takes 5 s of a fake clock; the budget is 60 s."""
    now = [0.0]

    class Slow(Recording):
        def purge_slot(self, slot: str, max_age_seconds: float) -> int:
            now[0] += 5.0
            return super().purge_slot(slot, max_age_seconds)

    store = Slow(tmp_path)
    _run(store, 0)
    store.purged.clear()

    def bounded(minute: int) -> int:
        return store.purge_since(artifact_slots(minute), minute, 30 * DAY, 60.0, lambda: now[0])

    bounded(200)
    # Twelve minutes behind in the budget, then the run's own folder.
    assert store.purged == [f"{n:02x}" for n in range(1, 13)] + ["c8"]
    assert _cursor(tmp_path) == 12
    store.purged.clear()
    bounded(201)
    assert store.purged[:12] == [f"{n:02x}" for n in range(13, 25)]
    assert _cursor(tmp_path) == 24
