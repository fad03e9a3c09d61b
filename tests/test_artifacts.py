"""Outputs by content hash under the tenant; nothing half-written, nothing mismatched."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from domain.hashing import canonical_json, request_hash
from store.artifacts import ArtifactStore


def test_put_get_is_content_addressed_and_tenant_scoped(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    ref = store.put("tenant-a", b"output bytes")
    assert ref.startswith("sha256:") and store.put("tenant-a", b"output bytes") == ref
    assert store.get("tenant-a", ref) == b"output bytes"
    assert store.get("tenant-b", ref) is None  # another tenant's artifact is not there
    assert store.get("tenant-a", "sha256:" + "0" * 64) is None
    assert store.get("tenant-a", "../../etc/passwd") is None
    with pytest.raises(ValueError):
        store.put("../escape", b"x")
    assert not list(tmp_path.rglob(".tmp-*"))


def test_tampered_artifact_is_not_returned(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    ref = store.put("t", b"original")
    [path] = [p for p in tmp_path.rglob("*") if p.is_file()]
    path.write_bytes(b"tampered")
    assert store.get("t", ref) is None


def test_retention_purges_only_old_artifacts_of_the_tenant(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    old, new, other = store.put("t", b"old"), store.put("t", b"new"), store.put("u", b"old")
    [old_path] = [
        p for p in (tmp_path / "t").rglob("*") if p.is_file() and p.read_bytes() == b"old"
    ]
    past = time.time() - 3600
    os.utime(old_path, (past, past))
    assert store.purge_older_than("t", 60) == 1
    assert store.get("t", old) is None and store.get("t", new) == b"new"
    assert store.get("u", other) == b"old"


def test_request_hash_is_canonical() -> None:
    a = {"b": [1, 2], "a": "ü"}
    b = {"a": "ü", "b": [1, 2]}
    assert canonical_json(a) == canonical_json(b)
    assert request_hash(a) == request_hash(b) != request_hash({"a": "u", "b": [1, 2]})


def test_a_folder_removed_under_a_running_store_is_made_again(tmp_path: Path) -> None:
    import shutil

    store = ArtifactStore(tmp_path)
    first = store.put("t", b"first")
    shutil.rmtree(tmp_path / "t")  # an operator clears the tenant's artifacts by hand
    again = store.put("t", b"first")
    assert again == first and store.get("t", again) == b"first"
