"""The answers' files are written and read off the event loop, each wait bounded: a stalled
artifact volume holds a thread of the artifact pool, never the loop, and once it is known to be
stalled new operations are refused at once (store/artifact_files.py)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from store.artifact_files import ArtifactFiles, VolumeStalled
from store.artifacts import ArtifactStore, reference
from tests.helpers.deadline import eventually
from tests.helpers.stalled_volume import StalledVolume


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_a_write_done_in_time_is_on_disk_when_it_returns(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    files = ArtifactFiles(store)
    ref = reference(b"the answer")
    await files.write("t", ref, b"the answer")
    assert store.get("t", ref) == b"the answer"  # a replay right after the answer finds it
    assert await files.get("t", ref) == b"the answer"
    assert await files.get("t", reference(b"never written")) is None
    files.close()


async def test_a_stalled_write_holds_a_thread_not_the_event_loop(tmp_path: Path) -> None:
    volume = StalledVolume(tmp_path)
    files = ArtifactFiles(volume, wait=0.3)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    beat = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    before = ticks
    with pytest.raises(VolumeStalled):
        await files.write("t", reference(b"x"), b"x")
    # The loop kept running while the volume held the write (written on the loop, the ticker
    # could not have moved until the volume answered).
    assert volume.writes == 1 and not volume.answer.is_set()
    assert ticks > before
    beat.cancel()
    volume.answer.set()
    files.close()


async def test_once_an_operation_outlived_the_wait_new_ones_are_refused_at_once(
    tmp_path: Path,
) -> None:
    volume = StalledVolume(tmp_path)
    clock = Clock()
    files = ArtifactFiles(volume, wait=0.3, clock=clock)
    with pytest.raises(VolumeStalled):
        await files.write("t", reference(b"first"), b"first")
    assert not files.stalled()  # by its own clock the write has not outlived the wait yet
    clock.now = 1.0
    assert files.stalled()
    with pytest.raises(VolumeStalled):
        await files.write("t", reference(b"second"), b"second")
    with pytest.raises(VolumeStalled):
        await files.get("t", reference(b"first"))
    assert volume.writes == 1  # refused without reaching the volume, holding no thread

    volume.answer.set()  # the volume answers: the stalled write ends, and writes go again
    await eventually(lambda: not files.stalled())
    ref = reference(b"third")
    await files.write("t", ref, b"third")
    assert volume.writes == 2 and volume.get("t", ref) == b"third"
    # The write that outlived its wait still completed once the volume answered.
    assert volume.get("t", reference(b"first")) == b"first"
    files.close()


async def test_a_read_the_volume_does_not_answer_is_given_up_after_the_wait(
    tmp_path: Path,
) -> None:
    """A real read that does not return: the artifact's path is a FIFO with no writer, so the
    read's open() waits in the kernel, as on a volume that does not answer."""
    store = ArtifactStore(tmp_path)
    files = ArtifactFiles(store, wait=0.3)
    ref = reference(b"stored")
    digest = ref.removeprefix("sha256:")
    (tmp_path / "t" / digest[:2]).mkdir(parents=True)
    fifo = tmp_path / "t" / digest[:2] / digest
    os.mkfifo(fifo)
    with pytest.raises(VolumeStalled):
        await files.get("t", ref)
    # A writer lets the read's open() return; it reads nothing that matches the reference.
    os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    await eventually(lambda: not files.stalled())
    files.close()
