"""An artifact volume that stops answering, for the tests of what a stalled volume may hold."""

from __future__ import annotations

import threading
from pathlib import Path

from store.artifacts import ArtifactStore


class StalledVolume(ArtifactStore):
    """A volume that takes a write and does not answer until released (an NFS server gone
    quiet): the write's thread waits, as it would in the kernel."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.answer = threading.Event()
        self.writes = 0

    def write(self, tenant_id: str, ref: str, data: bytes) -> None:
        self.writes += 1
        self.answer.wait(60)
        super().write(tenant_id, ref, data)
