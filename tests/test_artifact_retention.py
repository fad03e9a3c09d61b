"""Stored answers are kept for ARTIFACT_RETENTION_DAYS from the last receipt naming them, then
deleted by the receipt sweeper, one of each tenant's 256 folders a run. Before, nothing ever
deleted them: the artifact volume (20 Gi in the manifests) filled, and then every answer's write
failed and every replay of those keys had no answer."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client

from core.schedules import sweep_input
from core.settings import Settings
from domain.sweep import ARTIFACT_SLOTS, SweepInput, artifact_slots
from store.artifacts import EVIDENCE_DIR, PURGE_CURSOR, ArtifactStore
from workflows.receipt_sweeper import ReceiptSweeperWorkflow

DAY = 86_400.0


def _ref(slot: str, n: int = 0) -> str:
    return f"sha256:{slot}{n:062x}"


def _age(store: ArtifactStore, tenant: str, ref: str, days: float) -> Path:
    digest = ref.removeprefix("sha256:")
    path = store.root / tenant / digest[:2] / digest
    then = time.time() - days * DAY
    os.utime(path, (then, then))
    return path


def test_answers_past_retention_go_and_one_stored_again_stays(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    old, fresh, again = _ref("ab", 1), _ref("ab", 2), _ref("ab", 3)
    for ref in (old, fresh, again):
        store.write("t-1", ref, b"an answer")
    old_path = _age(store, "t-1", old, 40)
    _age(store, "t-1", again, 40)
    # The same answer stored again (a new receipt names it): its retention starts again.
    store.write("t-1", again, b"an answer")
    other_slot = _ref("cd")
    store.write("t-2", other_slot, b"an answer")
    _age(store, "t-2", other_slot, 40)

    assert store.purge_slot("ab", 30 * DAY) == 1
    assert not old_path.exists()
    assert (tmp_path / "t-1" / "ab" / fresh.removeprefix("sha256:")).exists()
    assert (tmp_path / "t-1" / "ab" / again.removeprefix("sha256:")).exists()
    # Another slot is another run's.
    assert (tmp_path / "t-2" / "cd" / other_slot.removeprefix("sha256:")).exists()
    # A purged answer written again is stored again.
    store.write("t-1", old, b"an answer")
    assert old_path.exists()


@pytest.mark.parametrize("period", [1, 2, 5, 60, 1440])
def test_every_folder_is_purged_in_256_minutes_whatever_the_schedule(period: int) -> None:
    """By the minute alone, a schedule every two minutes purged the even folders only, an
    hourly one a quarter of them: the rest kept every answer for ever."""
    runs = range(0, 256 + period, period)  # the minutes the schedule fires at
    slots = {slot for minute in runs for slot in artifact_slots(minute, period)}
    assert len(slots) == ARTIFACT_SLOTS


def test_evaluation_records_are_kept_apart_from_answers(tmp_path: Path) -> None:
    """Evaluation records were stored among the answers and purged with them: the evidence a
    deployment's approval rests on, gone after the answers' retention."""
    answers = ArtifactStore(tmp_path)
    evidence = ArtifactStore(tmp_path / EVIDENCE_DIR)
    ref = evidence.put("t-1", b"an evaluation record")
    old = _age(evidence, "t-1", ref, 400)
    for n in range(ARTIFACT_SLOTS):
        answers.purge_slot(f"{n:02x}", 30 * DAY)
    assert old.exists() and evidence.get("t-1", ref) == b"an evaluation record"


def test_the_sweepers_schedule_carries_the_artifacts_retention(settings: Settings) -> None:
    assert sweep_input(settings).artifact_retention_days == 30
    off = settings.model_copy(update={"artifact_retention_days": 0})
    assert sweep_input(off).artifact_retention_days is None


async def test_the_sweeper_deletes_old_answers_as_it_runs(
    settings: Settings, temporal_client: Client, tenant: str, worker: None
) -> None:
    # An old answer in every folder of this tenant: whichever minute the run falls in, it
    # deletes the one in its folder and no other. The session's volume with no purge cursor,
    # as on a first run: a sweeper run of an earlier test (a schedule's tick) would otherwise
    # have this one purge the folders of the minutes since (tests/test_sweeper_prunes.py).
    (settings.artifact_root / PURGE_CURSOR).unlink(missing_ok=True)
    store = ArtifactStore(settings.artifact_root)
    paths = []
    for n in range(ARTIFACT_SLOTS):
        ref = _ref(f"{n:02x}")
        store.write(tenant, ref, b"an old answer")
        paths.append(_age(store, tenant, ref, 40))
    report = await temporal_client.execute_workflow(
        ReceiptSweeperWorkflow.run,
        SweepInput(open_longer_than_seconds=600, artifact_retention_days=30),
        id=f"artifacts-test-{uuid.uuid4().hex[:8]}",
        task_queue=settings.temporal_task_queue,
    )
    assert report.artifacts_pruned >= 1
    assert sum(1 for p in paths if not p.exists()) == 1
