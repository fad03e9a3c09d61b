"""The artifact store's file I/O on the invoke path, off the event loop and bounded.

Written on the loop, an answer's file held that loop for as long as the volume took: a stalled
artifact volume (an NFS server gone quiet, a disk stuck in I/O) stopped every call and stream of
the process, not just the one writing. Here each write and read runs on a few threads of its
own (not the loop's default executor, which DNS lookups use), with two bounds:

- a caller waits at most `wait` seconds for its operation; one not done by then counts as
  failed (`VolumeStalled`): a write's answer still goes out, and a replay of its key finds no
  stored answer, as after a write that failed; a read finds nothing;
- once an operation has outlived that wait, the volume is taken as stalled and new operations
  are refused at once, holding neither a thread nor an answer's bytes, until it returns.

The caller's answer does not wait for its write (activities/invoke_close.py); the call's task
does, at most `wait`, so the workflow's result, which a replay of the key waits for, comes only
once the file is written or given up: a replay right after the answer finds the file.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from store.artifacts import ArtifactStore

# Threads for the volume's I/O: a write is a few system calls, 0.2-0.4 ms on the benchmark's disk
# (docs/benchmarks.md), so a handful keeps up with any rate the API reaches; stalled, they are
# all the volume can hold up.
WORKERS = 4
# How long a call waits for its file: a healthy write takes milliseconds.
WAIT_SECONDS = 2.0

_T = TypeVar("_T")


class VolumeStalled(OSError):
    """The artifact volume did not answer within the wait, or is known to be stalled."""


class ArtifactFiles:
    def __init__(
        self,
        store: ArtifactStore,
        *,
        wait: float = WAIT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self._wait = wait
        self._clock = clock
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=WORKERS, thread_name_prefix="artifact_files"
        )
        self._ids = itertools.count()
        # Operations handed to the threads and not yet returned: id -> when. Ended from a
        # thread (its future's callback), so under a lock.
        self._lock = threading.Lock()
        self._pending: dict[int, float] = {}

    async def write(self, tenant_id: str, ref: str, data: bytes) -> None:
        await self._run(self.store.write, tenant_id, ref, data)

    async def get(self, tenant_id: str, ref: str) -> bytes | None:
        return await self._run(self.store.get, tenant_id, ref)

    def stalled(self) -> bool:
        """Whether an operation has been under way for longer than a caller waits."""
        cutoff = self._clock() - self._wait
        with self._lock:
            return any(started < cutoff for started in self._pending.values())

    async def _run(self, fn: Callable[..., _T], *args: object) -> _T:
        if self.stalled():
            raise VolumeStalled("the artifact volume is stalled")
        key = next(self._ids)
        with self._lock:
            self._pending[key] = self._clock()
        done = self._pool.submit(fn, *args)
        done.add_done_callback(lambda _: self._ended(key))
        try:
            # A wait that times out cancels the operation if no thread has taken it yet; one
            # already running stays pending until the volume answers it.
            return await asyncio.wait_for(asyncio.wrap_future(done), self._wait)
        except TimeoutError:
            raise VolumeStalled(f"the artifact volume took over {self._wait:g} s") from None

    def _ended(self, key: int) -> None:
        with self._lock:
            self._pending.pop(key, None)

    def close(self) -> None:
        """Stop taking operations; threads held by a stalled volume are not waited for."""
        self._pool.shutdown(wait=False, cancel_futures=True)
