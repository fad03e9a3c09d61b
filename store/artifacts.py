"""Content-addressed artifact store on the filesystem: outputs live here by hash, under the
tenant, never in the database; receipts keep the reference.

Layout: {root}/{tenant}/{aa}/{sha256 hex}. Writes go to a temporary file and are renamed into
place, so a reader never sees half an artifact and concurrent writers of the same content are
harmless. Retention is per tenant: `purge_older_than` removes what the tenant no longer keeps.
The receipt sweeper's purge goes one folder a minute (`purge_since`), keeping in
{root}/{PURGE_CURSOR} the last minute whose folder it went through.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from domain.sweep import ARTIFACT_SLOTS, artifact_slot
from domain.tenants import is_tenant_id

_REF = re.compile(r"^sha256:([0-9a-f]{64})$")
# Where evaluation records are kept, beside the tenants' answers: no tenant id starts with an
# underscore (domain/tenants.py), and the answers' purge passes it over.
EVIDENCE_DIR = "_evidence"
# The last minute (since the epoch) whose folder the retention purge went through, on the volume
# beside the folders it counts for: a run's folders by its minute alone missed those of the
# minutes whose ticks were skipped (under the sweeper schedule's SKIP overlap, runs of 60-120 s
# ran every other minute and only the even folders were ever purged). No tenant id starts with
# a dot, and the purge passes over files at the root.
PURGE_CURSOR = ".purged-through"


# A temporary name unique to this process and write: the pid tells processes apart.
_SEQUENCE = itertools.count()
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)


def reference(data: bytes) -> str:
    """The reference `put` returns for `data`, known before it is written."""
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


class ArtifactStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._base = str(root)

    def _path(self, tenant_id: str, digest: str) -> Path:
        if not is_tenant_id(tenant_id):
            raise ValueError("tenant id is not usable as a directory name")
        return self.root / tenant_id / digest[:2] / digest

    def put(self, tenant_id: str, data: bytes) -> str:
        ref = reference(data)
        self.write(tenant_id, ref, data)
        return ref

    def write(self, tenant_id: str, ref: str, data: bytes) -> None:
        """Store `data` under `ref`, its `reference` as the caller already computed it (the
        invoke path names the file in the receipt before writing it)."""
        match = _REF.match(ref)
        if match is None:
            raise ValueError("not an artifact reference")
        digest = match.group(1)
        if not is_tenant_id(tenant_id):
            raise ValueError("tenant id is not usable as a directory name")
        folder = f"{self._base}/{tenant_id}/{digest[:2]}"
        path = f"{folder}/{digest}"
        # An invocation's write is one utime, one create, one write and one rename, with no
        # Path objects, no mkdir that fails with EEXIST, no tempfile name search (4.8% of the
        # API's CPU under py-spy, c=16); the folder is made only when the create says it is
        # missing. (A set of the folders made kept 256 entries a tenant for the process's
        # life: some 95 MB at 3,000 tenants.)
        try:
            # Stored already (the same answer again): its age starts again, as retention
            # counts from the newest receipt naming it (`purge_slot`).
            os.utime(path)
            return
        except FileNotFoundError:
            pass
        tmp = f"{folder}/.tmp-{os.getpid()}-{next(_SEQUENCE)}"
        try:
            fd = os.open(tmp, _CREATE, 0o600)
        except FileNotFoundError:  # the folder's first answer (or it was removed): make it
            os.makedirs(folder, exist_ok=True)
            fd = os.open(tmp, _CREATE, 0o600)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    def get(self, tenant_id: str, ref: str) -> bytes | None:
        match = _REF.match(ref)
        if match is None:
            return None
        path = self._path(tenant_id, match.group(1))
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        # A reference is a promise about content: never hand back bytes that do not match it.
        return data if hashlib.sha256(data).hexdigest() == match.group(1) else None

    def purge_slot(self, slot: str, max_age_seconds: float) -> int:
        """Every tenant's stored answers in folder `slot` (the hash's first two hex digits) not
        written or stored again for `max_age_seconds`, and temporary files a crashed write left
        there: how many were removed. One folder of each tenant, so a sweeper run's work is
        bounded (domain/sweep.py ARTIFACT_SLOTS)."""
        if not self.root.is_dir():
            return 0
        cutoff = time.time() - max_age_seconds
        removed = 0
        for tenant in os.scandir(self.root):
            folder = os.path.join(tenant.path, slot)
            if not is_tenant_id(tenant.name) or not tenant.is_dir() or not os.path.isdir(folder):
                continue  # a tenant's answers only: never the evaluation records (EVIDENCE_DIR)
            for entry in os.scandir(folder):
                try:
                    if entry.is_file() and entry.stat().st_mtime < cutoff:
                        os.unlink(entry.path)
                        removed += 1
                except FileNotFoundError:  # removed meanwhile (another worker's run)
                    continue
        return removed

    def purge_since(
        self,
        slots: Sequence[str],
        minute: int,
        max_age_seconds: float,
        budget_seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> int:
        """`purge_slot` for `slots` (the sweeper run's own) and for the folder of every minute
        since the cursor through `minute` (minutes since the epoch), each at most once: all 256
        after a gap longer than their round. The cursor is moved past each minute's folder as
        it is done, so a run cut short keeps what it did and the next goes on from there. With
        no cursor, or one unreadable or ahead of `minute` (another clock), `slots` alone: the
        cursor starts at `minute`. How many answers were removed.

        The minutes behind stop once `budget_seconds` (by `clock`) are spent, the cursor at the
        last one done: the rest is the next run's. Unbounded, the first run after an outage of
        hours walked up to the whole volume in one attempt (on a network share with millions
        of answers, tens of minutes), past the attempt's 5 minutes, three times, past the run's
        10: the sweeps of the ticks between dropped again, and each longer run left more minutes
        to the next. The run's own `slots` are purged whatever the budget (one folder a minute).

        One purge at a time per volume: the sweeper's schedule runs one run at a time (SKIP)."""
        if not self.root.is_dir():
            return 0  # nothing stored yet: nothing to purge, nowhere to keep the cursor
        last = self._purged_through()
        if last is not None and last > minute:
            last = None  # ahead: another host's clock, or not a minute of ours
        removed = 0
        done: set[str] = set()
        deadline = None if budget_seconds is None else clock() + budget_seconds
        if last is not None:
            for behind in range(max(last + 1, minute - ARTIFACT_SLOTS + 1), minute + 1):
                if deadline is not None and clock() >= deadline:
                    break  # the rest is the next run's, from the cursor
                slot = artifact_slot(behind)
                removed += self.purge_slot(slot, max_age_seconds)
                done.add(slot)
                self._purged_to(behind)
        for slot in slots:
            if slot not in done:
                removed += self.purge_slot(slot, max_age_seconds)
                done.add(slot)
        if last is None:
            self._purged_to(minute)  # once its own folders are done: a failed run moves nothing
        return removed

    def _purged_through(self) -> int | None:
        try:
            with open(f"{self._base}/{PURGE_CURSOR}", "rb") as cursor:
                text = cursor.read(32).strip()
        except OSError:  # missing (the first run) or unreadable: the run's own folders only
            return None
        return int(text) if text.isdigit() else None

    def _purged_to(self, minute: int) -> None:
        # Renamed into place, as the answers are: a run cut short mid-write leaves the cursor
        # before, never half a number.
        cursor = f"{self._base}/{PURGE_CURSOR}"
        tmp = f"{cursor}.tmp-{os.getpid()}-{next(_SEQUENCE)}"
        try:
            fd = os.open(tmp, _CREATE, 0o600)
            try:
                os.write(fd, f"{minute}\n".encode())
            finally:
                os.close(fd)
            os.replace(tmp, cursor)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    def purge_older_than(self, tenant_id: str, max_age_seconds: float) -> int:
        base = self.root / tenant_id
        if not base.is_dir():
            return 0
        cutoff = time.time() - max_age_seconds
        removed = 0
        for path in base.glob("*/*"):
            if path.is_file() and path.stat().st_mtime < cutoff:
                path.unlink(missing_ok=True)
                removed += 1
        return removed
