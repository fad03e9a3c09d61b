"""`make dev` end to end: the embedded default (Temporal dev server + SQLite) comes up ready
within 60 s, its printed credentials work, Ctrl-C stops everything, and a rerun reuses data."""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port
from tests.helpers.process import Proc

MODEL_ROUTER = str(Path(sys.executable).parent / "model-router")


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _start(data_dir: Path, ports: dict[str, int]) -> Proc:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MODEL_ROUTER_")}
    return Proc(
        [
            MODEL_ROUTER,
            "dev",
            "--data-dir",
            str(data_dir),
            "--api-port",
            str(ports["api"]),
            "--temporal-port",
            str(ports["temporal"]),
            "--ui-port",
            str(ports["ui"]),
            "--upstream-port",
            str(ports["upstream"]),
        ],
        env=env,
        cwd=data_dir,
    )


def _value(proc: Proc, label: str) -> str:
    return proc.wait_for_line(label, 5).split()[-1]


@pytest.fixture
def ports() -> dict[str, int]:
    return {"api": free_port(), "temporal": free_port(), "ui": free_port(), "upstream": free_port()}


def test_dev_is_ready_within_60s_and_stops_everything_on_ctrl_c(
    tmp_path: Path, ports: dict[str, int]
) -> None:
    started = time.monotonic()
    dev = _start(tmp_path, ports)
    try:
        dev.wait_for_line("model-router is up", timeout=60)
        ready_after = time.monotonic() - started
        assert ready_after < 60
        api = f"http://127.0.0.1:{ports['api']}"
        assert api in dev.wait_for_line("  API ", 5)
        assert f"http://127.0.0.1:{ports['ui']}" in dev.output
        assert f"{api}/console" in dev.wait_for_line("  console ", 5)
        assert httpx.get(f"{api}/console/sign-in").status_code == 200
        client_id, secret = _value(dev, "client_id"), _value(dev, "client_secret")

        assert httpx.get(f"{api}/readyz").status_code == 200
        token = httpx.post(
            f"{api}/oauth/token",
            data={"grant_type": "client_credentials"},
            auth=(client_id, secret),
        ).json()["access_token"]
        profiles = httpx.get(
            f"{api}/factory/model-profiles", headers={"Authorization": f"Bearer {token}"}
        )
        assert profiles.status_code == 200
        # The demo catalog (on the local upstream simulator) lets a newcomer invoke at once.
        dev.wait_for_line("demo catalog ready", timeout=120)
        answer = httpx.post(
            f"{api}/v1/chat/completions",
            json={"model": "code-agent", "messages": [{"role": "user", "content": "hi"}]},
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["choices"][0]["message"]["content"] == "Echo: hi"
        # The embedded default really is SQLite and a Temporal SQLite file under the data dir.
        assert (tmp_path / "model-router.db").exists() and (tmp_path / "temporal.db").exists()
    finally:
        dev.proc.send_signal(signal.SIGINT)
        code = dev.wait(timeout=40)
    assert code == 0, dev.output
    assert not any(_port_open(p) for p in ports.values()), "a dev process outlived Ctrl-C"

    # Running it again reuses the data: the same credentials still work.
    again = _start(tmp_path, ports)
    try:
        again.wait_for_line("model-router is up", timeout=60)
        assert _value(again, "client_secret") == secret
        resp = httpx.post(
            f"http://127.0.0.1:{ports['api']}/oauth/token",
            data={"grant_type": "client_credentials"},
            auth=(client_id, secret),
        )
        assert resp.status_code == 200
    finally:
        again.proc.send_signal(signal.SIGINT)
        assert again.wait(timeout=40) == 0, again.output
