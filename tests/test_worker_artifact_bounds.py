"""The worker's artifact-volume I/O holds neither its event loop nor the loop's default executor.

An evaluation's record is written through ArtifactFiles (store/artifact_files.py): written on
the loop, a volume gone quiet froze the whole worker process (webhook polls' heartbeats, the
closers' queue, lifecycle steps) until it answered; now only the record step waits, and fails
after the files' wait. The answers' retention purge walks the volume on a thread of its own: on
the default executor (asyncio.to_thread) each stalled attempt held one of the few threads
aiohttp's resolver looks host names up on, and after a handful every DNS lookup of the worker
waited for the volume."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.evaluation import EvaluationActivities
from activities.evaluation_types import RecordInput, RerankRecordInput
from activities.sweeper import SweeperActivities
from domain.suite import Suite
from domain.sweep import PruneArtifactsInput
from store.artifact_files import ArtifactFiles
from store.artifacts import ArtifactStore
from tests.helpers.deadline import UNBOUNDED, eventually

CAP = 16_000


class QuietVolume(ArtifactStore):
    """A volume that takes a write and does not answer until released. Left unreleased for
    UNBOUNDED seconds the write gives up: only a write on the event loop can outlast the test's
    own steps, which release it."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.entered = threading.Event()
        self.answer = threading.Event()
        self.gave_up = False

    def write(self, tenant_id: str, ref: str, data: bytes) -> None:
        self.entered.set()
        if not self.answer.wait(UNBOUNDED):
            self.gave_up = True
            raise OSError(errno.EIO, "the volume never answered")
        super().write(tenant_id, ref, data)


_SUITE = Suite(max_context_tokens=4096, context_token_cap=CAP)
RECORD_STEPS = [
    pytest.param(
        "record",
        RecordInput(
            evaluation_id="e", tenant_id="t", deployment_id="d/x", context_tokens=4096,
            results=[], suite_version=_SUITE.suite_version,
        ),
        id="record",
    ),
    pytest.param(
        "record_rerank",
        RerankRecordInput(evaluation_id="e", tenant_id="t", deployment_id="d/x", results=[]),
        id="record_rerank",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("step", "data"), RECORD_STEPS)
async def test_a_stalled_record_write_leaves_the_loop_running_and_fails_the_step(
    tmp_path: Path, step: str, data: BaseModel
) -> None:
    volume = QuietVolume(tmp_path)
    files = ArtifactFiles(volume, wait=0.3)
    # The step reaches neither the store, a provider nor Temporal before its record is written.
    unused: Any = None
    acts = EvaluationActivities(unused, unused, files, unused, context_token_cap=CAP)
    task = asyncio.create_task(ActivityEnvironment().run(getattr(acts, step), data))
    try:
        # Written on the loop, the write holds the loop until it gives up: this poll, and the
        # sleep below, run only after, and find it given up.
        await eventually(volume.entered.is_set, timeout=2 * UNBOUNDED)
        await asyncio.wait_for(asyncio.sleep(0.01), 1)
        assert not volume.gave_up, "the event loop was held for as long as the volume"
        with pytest.raises(ApplicationError) as failed:
            await asyncio.wait_for(task, UNBOUNDED)
        # Ended by the files' wait while the volume still held the write, and retried by the
        # step's policy (not CannotRun, not non-retryable).
        assert not volume.answer.is_set() and not volume.gave_up
        assert failed.value.type == "VolumeStalled" and not failed.value.non_retryable
        assert failed.value.message.startswith("the evaluation record was not stored")
        assert "artifact volume" in failed.value.message
    finally:
        volume.answer.set()
        files.close()
        await asyncio.gather(task, return_exceptions=True)


class QuietPurges(ArtifactStore):
    """A volume whose purges do not answer until released (an NFS server gone quiet)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.answer = threading.Event()
        self._lock = threading.Lock()
        self.purges = 0

    def purge_since(
        self, slots: Sequence[str], minute: int, max_age_seconds: float, *more: Any
    ) -> int:
        with self._lock:
            self.purges += 1
        self.answer.wait(UNBOUNDED)
        return 0


def _refused(task: asyncio.Task[int]) -> bool:
    if not task.done() or task.cancelled():
        return False
    exc = task.exception()
    return isinstance(exc, ApplicationError) and exc.type == "VolumeStalled"


async def test_stalled_purges_leave_the_resolver_its_threads(
    sessions: async_sessionmaker[AsyncSession], tmp_path: Path
) -> None:
    volume = QuietPurges(tmp_path)
    acts = SweeperActivities(sessions, volume)
    data = PruneArtifactsInput(retention_days=30, slots=["ab"])
    env = ActivityEnvironment()
    loop = asyncio.get_running_loop()
    # The loop's default executor's threads (ThreadPoolExecutor's default max_workers): as many
    # attempts as that, and one more, each stalled on the volume.
    threads = min(32, (os.cpu_count() or 1) + 4)
    first = asyncio.create_task(env.run(acts.prune_artifacts, data))
    others: list[asyncio.Task[int]] = []
    try:
        await eventually(lambda: volume.purges == 1)
        others = [asyncio.create_task(env.run(acts.prune_artifacts, data)) for _ in range(threads)]
        # Each later attempt either reached the volume (a thread held) or was refused: on the
        # default executor, every one of its threads is now held by the volume.
        await eventually(lambda: volume.purges + sum(map(_refused, others)) >= threads)
        resolved = await asyncio.wait_for(loop.getaddrinfo("localhost", 80), 5)
        assert resolved
        # One purge at a time on the volume: the attempts after it were refused at once.
        assert volume.purges == 1 and all(map(_refused, others)) and not first.done()
    finally:
        volume.answer.set()
        await asyncio.wait_for(asyncio.gather(first, *others, return_exceptions=True), UNBOUNDED)
    assert first.result() == 0
    # Once the volume answered, the purge's thread takes the next run.
    volume.answer.set()
    assert await env.run(acts.prune_artifacts, data) == 0
    assert volume.purges == 2
