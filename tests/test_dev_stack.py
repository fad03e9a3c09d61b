"""`make dev` end to end: the embedded default (Temporal dev server + SQLite) comes up, its
printed credentials work, Ctrl-C stops everything, and a rerun reuses data. How soon it is up
(the promise: within 60 s) is measured by bench/bench_dev_start.py, not here: the waits below
are bounds on a hang (`UP`), not targets."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sqlite3
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI

from tests.conftest import free_port
from tests.helpers.process import Proc

MODEL_ROUTER = str(Path(sys.executable).parent / "model-router")
# A bound on a start that hangs, not a target: the dev stack is up in 5-20 s on a 2-core
# machine (bench/bench_dev_start.py), and a start is slower under the suite's other workers.
UP = 180.0


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
            "--worker-metrics-port",
            str(ports["worker_metrics"]),
        ],
        env=env,
        cwd=data_dir,
    )


def _journal_mode(db: Path) -> str:
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        return str(conn.execute("PRAGMA journal_mode").fetchone()[0])


@contextlib.contextmanager
def _explained(dev: Proc, data_dir: Path) -> Iterator[None]:
    """A failure inside says what `make dev` printed and the tail of each process's log: a
    failure on CI is seen once, on a machine that is gone by the time anyone reads it."""
    try:
        yield
    except Exception as exc:
        logs = "".join(
            f"\n--- {log.name} (last 40 lines)\n"
            + "\n".join(log.read_text(errors="replace").splitlines()[-40:])
            for log in sorted(data_dir.glob("*.log"))
        )
        raise AssertionError(f"{exc!r}\n--- make dev printed:\n{dev.output}{logs}") from exc


def _value(proc: Proc, label: str) -> str:
    return proc.wait_for_line(label, 5).split()[-1]


@pytest.fixture
def ports() -> dict[str, int]:
    return {name: free_port() for name in ("api", "temporal", "ui", "upstream", "worker_metrics")}


def test_dev_comes_up_and_stops_everything_on_ctrl_c(tmp_path: Path, ports: dict[str, int]) -> None:
    dev = _start(tmp_path, ports)
    try:
        with _explained(dev, tmp_path):
            dev.wait_for_line("model-router is up", timeout=UP)
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
            dev.wait_for_line("demo catalog ready", timeout=UP)
            assert _say_hi(api, token) == "Echo: hi"
            # The embedded default really is SQLite and a Temporal SQLite file under the data dir.
            assert (tmp_path / "model-router.db").exists() and (tmp_path / "temporal.db").exists()
            # Temporal's file runs in WAL mode, as the service database does (cli/dev.py).
            assert _journal_mode(tmp_path / "temporal.db") == "wal"
    finally:
        dev.proc.send_signal(signal.SIGINT)
        code = dev.wait(timeout=40)
    assert code == 0, dev.output
    assert not any(_port_open(p) for p in ports.values()), "a dev process outlived Ctrl-C"

    # Running it again reuses the data: the same credentials still work.
    again = _start(tmp_path, ports)
    try:
        with _explained(again, tmp_path):
            again.wait_for_line("model-router is up", timeout=UP)
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


def _say_hi(api: str, token: str) -> str:
    """The demo profile's answer to "hi"."""
    answer = httpx.post(
        f"{api}/v1/chat/completions",
        json={"model": "code-agent", "messages": [{"role": "user", "content": "hi"}]},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    return str(answer.json()["choices"][0]["message"]["content"])


def _token(api: str, client_id: str, secret: str) -> str:
    resp = httpx.post(
        f"{api}/oauth/token", data={"grant_type": "client_credentials"}, auth=(client_id, secret)
    )
    return str(resp.json()["access_token"])


def _zoned(value: str) -> bool:
    return value.endswith("Z") or value[-6] in "+-"


def test_dev_papercuts_timestamps_and_json_logs_on_the_embedded_default(
    tmp_path: Path, ports: dict[str, int]
) -> None:
    """What a newcomer meets on `make dev` (SQLite): a taken port names its flag; "up" means
    the demo catalog is usable; the demo model calls tools in parallel as its evidence says;
    every timestamp has a zone; every log line is JSON; another --upstream-port keeps the demo
    catalog working."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert "8787" in readme and "--upstream-port" in readme

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", ports["upstream"]))
        taken.listen()
        refused = _start(tmp_path, ports)
        assert refused.wait(timeout=30) == 2
    assert f"port {ports['upstream']}" in refused.output and "--upstream-port" in refused.output

    dev = _start(tmp_path, ports)
    api = f"http://127.0.0.1:{ports['api']}"
    try:
        with _explained(dev, tmp_path):
            dev.wait_for_line("model-router is up", timeout=UP)
            dev.wait_for_line("demo catalog ready", 5)
            client_id, secret = _value(dev, "client_id"), _value(dev, "client_secret")
            token = _token(api, client_id, secret)
            auth = {"Authorization": f"Bearer {token}"}
            sdk = OpenAI(base_url=f"{api}/v1", api_key=token, max_retries=0)
            run_id = str(uuid.uuid4())
            # Usable at once: no waiting for a catalog after "up".
            tools: Any = [
                {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
                for n in ("get_weather", "get_time")
            ]
            answer = sdk.chat.completions.create(
                model="code-agent",
                messages=[{"role": "user", "content": "weather and time in Paris?"}],
                tools=tools,
                extra_headers={"X-Run-Id": run_id},
            )
            calls = answer.choices[0].message.tool_calls or []
            assert sorted(c.function.name for c in calls if c.type == "function") == [
                "get_time",
                "get_weather",
            ]

            [receipt] = httpx.get(
                f"{api}/factory/runs/{run_id}/model-receipts", headers=auth
            ).json()
            assert _zoned(receipt["startedAt"]) and _zoned(receipt["endedAt"]), receipt
            events = httpx.get(f"{api}/factory/events?limit=50", headers=auth).json()
            items = events["events"]
            assert items and all(_zoned(e["time"]) for e in items), items[:2]
            line = (
                '{"provider":"local-upstream","providerRequestId":"x-1",'
                '"inputTokens":1,"outputTokens":1}\n'
            )
            jsonl = {**auth, "Content-Type": "application/x-ndjson"}
            first = httpx.post(f"{api}/factory/usage-statements", content=line, headers=jsonl)
            again = httpx.post(f"{api}/factory/usage-statements", content=line, headers=jsonl)
            assert (first.status_code, again.status_code) == (201, 200)
            assert first.json()["importedAt"] == again.json()["importedAt"]
            assert _zoned(again.json()["importedAt"])
    finally:
        dev.proc.send_signal(signal.SIGINT)
        assert dev.wait(timeout=40) == 0, dev.output

    for name in ("api", "worker", "upstream"):
        lines = [x for x in (tmp_path / f"{name}.log").read_text().splitlines() if x.strip()]
        plain = []
        for text in lines:
            try:
                json.loads(text)
            except ValueError:
                plain.append(text)
        assert lines and plain == [], f"{name}.log: {plain[:5]}"

    # Another simulator port: the seeded catalog follows it.
    ports["upstream"] = free_port()
    moved = _start(tmp_path, ports)
    try:
        with _explained(moved, tmp_path):
            moved.wait_for_line("model-router is up", timeout=UP)
            moved.wait_for_line("demo catalog ready", 5)
            token = _token(api, _value(moved, "client_id"), _value(moved, "client_secret"))
            assert _say_hi(api, token) == "Echo: hi"
            assert f"127.0.0.1:{ports['upstream']}" in moved.output
    finally:
        moved.proc.send_signal(signal.SIGINT)
        assert moved.wait(timeout=40) == 0, moved.output
