"""`make test` itself: a failing test makes it exit non-zero, and it leaves no server behind."""

from __future__ import annotations

import os
import re
import socket
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.3)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_a_failing_test_fails_the_command_and_stops_every_server(tmp_path: Path) -> None:
    failing = tmp_path / "test_fails.py"
    failing.write_text("def test_fails():\n    assert 1 == 2\n")
    # Without the variables the script starts its own PostgreSQL and Temporal, as on a clean
    # machine.
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODEL_ROUTER_TEST_")}
    done = subprocess.run(
        ["bash", "scripts/test.sh", str(failing), "-p", "no:cacheprovider"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert "1 failed" in out
    pg = re.search(r"PostgreSQL \S+ on port (\d+)", out)
    temporal = re.search(r"Temporal dev server on port (\d+)", out)
    assert pg and temporal, out
    assert not _open(int(pg.group(1))), "PostgreSQL outlived the test command"
    assert not _open(int(temporal.group(1))), "Temporal outlived the test command"
