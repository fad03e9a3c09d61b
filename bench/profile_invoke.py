"""Where the API process spends its CPU under non-stream gateway load (c=16, or c=1 with
`--path ns1`): the benchmark's
stack (bench/invoke_stack.py), seeded as the benchmark seeds it, with `py-spy record` attached
to the API while the load runs; prints on-CPU samples by module (self time) and by package
(inclusive), and keeps the collapsed stacks for a closer look.

Run: .venv/bin/python bench/profile_invoke.py [--path ns16|ns1] [--calls 1600] [--rate 250]
[--out DIR] [--dev-server]

`--dev-server` records the Temporal dev server instead, with `perf record -g` (Linux's perf,
not installed by the project), and names its samples from the binary's own function table
(bench/dev_server_profile.py, bench/go_symbols.py).

py-spy is a dev tool, not a dependency, and `uv sync` (scripts/test.sh) removes what is not in
the lock: install it apart, `uv pip install --target DIR py-spy`, and pass `--py-spy
DIR/bin/py-spy` (or have it on PATH). The
sampler runs in its own process, so the load's numbers here are not the benchmark's; read the
shares, not the absolute rates.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.dev_server_profile import report as dev_server_report  # noqa: E402
from bench.dev_server_profile import samples  # noqa: E402
from bench.go_symbols import GoSymbols  # noqa: E402
from bench.invoke_database import create_database  # noqa: E402
from bench.invoke_load import load_client, run_load  # noqa: E402
from bench.invoke_measure import make_paths  # noqa: E402
from bench.invoke_seed import seed  # noqa: E402
from bench.invoke_stack import VENV_BIN, Stack  # noqa: E402
from core.settings import Settings  # noqa: E402
from core.temporal import connect  # noqa: E402
from store.db import create_engine, session_factory  # noqa: E402
from store.migrate import upgrade  # noqa: E402

# Without --native, py-spy takes a thread parked in a lock for a running one: an idle pool
# thread (the workflow runner's, anyio's, the resolver's) sits in one of these.
_IDLE = ("_worker (concurrent/futures/thread.py", "Condition.wait (threading.py", "Event.wait")


def module_of(frame: str) -> str:
    """`func (path/to/file.py:12)` -> a short module name (site-packages or the repo stripped)."""
    start, end = frame.rfind("("), frame.rfind(":")
    path = frame[start + 1 : end] if start >= 0 and end > start else frame
    for marker in ("site-packages/", "/lib/python3.11/", str(ROOT) + "/"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return path.removesuffix(".py").replace("/", ".")


def package_of(module: str) -> str:
    head = module.split(".")[0]
    return head if head not in ("api", "activities", "providers", "store", "core") else module


# The parts of an invocation on the API's main thread. A sample belongs to the deepest frame on
# its stack that this table names: a library's own frame (pydantic, json, aiohttp, …) counts for
# whoever called it, and the web framework's for itself (dependency solving, the body, the
# response) rather than for the middlewares above it, which are on every request's stack. py-spy
# writes a frame as `function (path/file.py:line)`, the path from the package or the repo root.
_PARTS = (
    ("Temporal: workflow activations and completions", ("(temporalio/worker/_workflow",)),
    ("Temporal: the local activity's worker", ("(temporalio/worker/_activity",)),
    ("Temporal: the start (client side)", ("(temporalio/client",)),
    ("provider call (adapter, SDK, aiohttp)", ("(providers/",)),
    ("answer's file", ("(store/artifacts",)),
    ("receipt statements (asyncpg)", ("(store/", "(asyncpg/")),
    ("invoke activity, hub, pricing", ("(activities/",)),
    (
        "middlewares (request id, access log, limits, token, timing)",
        ("(api/limits", "(api/middleware", "(api/tracing", "(api/server_timing", "(core/"),
    ),
    ("route, plan, invocations, wire", ("(api/", "(routing/", "(domain/")),
    ("FastAPI and Starlette: dependencies, body, response", ("(fastapi/", "(starlette/")),
    ("uvicorn's protocol", ("(uvicorn/protocols",)),
)


def phase_of(frames: list[str]) -> str:
    for frame in reversed(frames):
        for name, marks in _PARTS:
            if any(m in frame for m in marks):
                return name
    if frames[-1].startswith("Runner.run (asyncio/runners.py"):
        return "the event loop itself (C callbacks: uvloop, httptools, asyncpg's protocol)"
    return "other"


def report(collapsed: Path, top: int) -> str:
    self_by_module: Counter[str] = Counter()
    incl_by_package: Counter[str] = Counter()
    incl_by_module: Counter[str] = Counter()
    main_by_phase: Counter[str] = Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count_s = line.rpartition(" ")
        count = int(count_s)
        # Process and thread labels come first; frames are `func (file.py:line)`.
        frames = [f for f in stack.split(";") if ".py" in f]
        if not frames or frames[-1].startswith(_IDLE):
            continue
        total += count
        if "MainThread" in stack.split(";", 1)[0]:
            main_by_phase[phase_of(frames)] += count
        self_by_module[module_of(frames[-1])] += count
        for pkg in {module_of(f).split(".")[0] for f in frames}:
            incl_by_package[pkg] += count
        for mod in {module_of(f) for f in frames}:
            incl_by_module[mod] += count
    out = [f"{total} on-CPU samples"]
    out.append("\nself time by module:")
    out += [f"  {n / total:6.1%}  {m}" for m, n in self_by_module.most_common(top)]
    out.append("\ninclusive by top-level package:")
    out += [f"  {n / total:6.1%}  {m}" for m, n in incl_by_package.most_common(top)]
    out.append("\ninclusive by module (ours):")
    ours = ("api.", "activities.", "providers.", "store.", "core.", "domain.", "workflows.")
    mine = [(m, n) for m, n in incl_by_module.most_common() if m.startswith(ours)]
    out += [f"  {n / total:6.1%}  {m}" for m, n in mine[:top]]
    main = sum(main_by_phase.values()) or 1
    out.append(f"\nthe main thread ({main} samples) by part of the invocation:")
    out += [f"  {n / main:6.1%}  {m}" for m, n in main_by_phase.most_common()]
    return "\n".join(out)


def _sampler(stack: Stack, dev_server: bool, rate: int, py_spy: str) -> tuple[list[str], Path]:
    """The sampler's command and where it writes: py-spy on the API, or perf on the dev server."""
    if dev_server:
        child = stack.child("temporal")
        assert child is not None
        out = stack.work / "dev-server.perf"
        return ["perf", "record", "-g", "-F", str(rate), "-p", str(child.pid), "-o", str(out)], out
    child = stack.child("api")
    assert child is not None
    out = stack.work / "api.collapsed"
    command = [py_spy, "record", "--pid", str(child.pid), "--rate", str(rate)]
    return [*command, "--format", "raw", "--output", str(out), "--threads"], out


async def load(
    stack: Stack,
    settings: Settings,
    database_url: str,
    path: str,
    calls: int,
    sampler: list[str],
) -> None:
    engine = create_engine(database_url)
    sessions = session_factory(engine)
    temporal = await connect(settings)
    api = f"http://127.0.0.1:{stack.api_port}"
    token = await seed(api, sessions, temporal, f"upstream:127.0.0.1:{stack.upstream_port}")
    clients = [load_client() for _ in range(2)]
    gateway = make_paths(stack, token, False, clients)[1]
    await run_load(gateway, path, 200, "warm", None)
    spy = await asyncio.create_subprocess_exec(
        *sampler, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
    )
    await asyncio.sleep(1.0)  # the sampler attaches
    run = await run_load(gateway, path, calls, "profiled", None)
    spy.send_signal(signal.SIGINT)  # the sampler writes what it has and exits
    await asyncio.wait_for(spy.wait(), 30)
    rate_s = len(run.samples) / run.wall
    print(f"{len(run.samples)} calls, {len(run.errors)} errors, {rate_s:.1f}/s")
    for c in clients:
        await c.aclose()
    await engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--path", choices=("ns16", "ns1"), default="ns16")
    parser.add_argument("--calls", type=int, default=1600)
    parser.add_argument("--rate", type=int, default=250, help="samples per second")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--py-spy", default=shutil.which("py-spy") or "py-spy")
    parser.add_argument("--out", type=Path, default=None, help="copy the samples here")
    parser.add_argument(
        "--dev-server",
        action="store_true",
        help="profile the Temporal dev server with perf instead of the API with py-spy",
    )
    args = parser.parse_args()
    stack = Stack()
    try:
        server_url = stack.start_postgres()
        database_url, _ = asyncio.run(create_database(server_url))
        upgrade(database_url)
        stack.start_temporal()
        stack.start_upstream()
        env = stack.service_env(database_url)
        stack.start_worker(env)
        stack.start_api(env)
        settings = stack.settings(database_url)
        sampler, written = _sampler(stack, args.dev_server, args.rate, args.py_spy)
        asyncio.run(load(stack, settings, database_url, args.path, args.calls, sampler))
        if args.dev_server:
            binary = GoSymbols.from_binary(VENV_BIN / "temporal")
            print(dev_server_report(samples(written, binary), args.top))
        else:
            print(report(written, args.top))
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
            shutil.copy(written, args.out / written.name)
    finally:
        stack.close(keep=False)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
