"""Content-addressed artifact store on the filesystem: outputs live here by hash, under the
tenant, never in the database; receipts keep the reference.

Layout: {root}/{tenant}/{aa}/{sha256 hex}. Writes go to a temporary file and are renamed into
place, so a reader never sees half an artifact and concurrent writers of the same content are
harmless. Retention is per tenant: `purge_older_than` removes what the tenant no longer keeps.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import time
from pathlib import Path

_TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_REF = re.compile(r"^sha256:([0-9a-f]{64})$")


class ArtifactStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, tenant_id: str, digest: str) -> Path:
        if not _TENANT.match(tenant_id):
            raise ValueError("tenant id is not usable as a directory name")
        return self.root / tenant_id / digest[:2] / digest

    def put(self, tenant_id: str, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        path = self._path(tenant_id, digest)
        if path.exists():
            return f"sha256:{digest}"
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return f"sha256:{digest}"

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
