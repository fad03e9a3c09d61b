"""Two checkouts of the API on one stack, their calls alternated: a paired comparison of an
invoke-path change that host drift cannot swamp.

Run: .venv/bin/python bench/invoke_pair.py OTHER_CHECKOUT [--pairs 300] [--run 1] [--pace 0]
     [--stream] [--blocks 3] [--scenarios ns16,st16] [--keep]

`bench_invoke.py` compares the gateway with LiteLLM inside one run, but a change to the gateway is
judged by comparing two runs, minutes apart, on a machine shared with others: in issue 14's passes
the same unchanged path moved by 3-4 ms at c=1 and by a third at c=16 from one run to the next
(docs/benchmarks.md, ninth and eleventh passes), more than most changes are worth. Here both
versions run at once, on the same PostgreSQL database, Temporal dev server, upstream simulator and
worker: one API process started from this checkout ("this") and one from OTHER_CHECKOUT ("other",
e.g. a `git worktree` with the change, sharing this virtualenv). c=1 non-stream calls alternate one
by one (the order swapped every pair), so both see the same neighbours and the same dev server
history; the paired difference's median is the change's effect at c=1 (`--run N`: runs of N calls
a side instead, for a change that moves work from behind one call's answer onto the next; `--pace
MS`: each call sent that long after the previous ended, as a caller with think time between
calls). One call a turn misjudges a change that answers ahead of work it leaves behind: that work
lands on the other side's next call. Answers sent ahead of their starts' replies read -1.86 ms so
(400 pairs), +0.24 in runs of 10 and +0.04 paced 100 ms apart (docs/benchmarks.md, twentieth
pass). Paced, a side's own calls are one or three of the other side's turns apart in turn (at
100 ms, about 110 and 330 ms), astride the 0.25 s overlap window: until the health check of the
twenty-first pass, every other call of each side began only after its start's reply. Then,
per scenario, blocks at c=16 alternate ABBA, each with the API's and the dev server's CPU per call,
its window closed once its workflows have (`invoke_drain.py`). Each side's calls carry their own
Idempotency-Keys (a key the other side used would be a replay). Both API processes poll the same
InvokeModel task queue, but eager starts run where they were started; each has its own caller
queue. Nothing is written to docs/benchmarks.md: the tables go to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from temporalio.client import Client

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.invoke_config import conc_of
from bench.invoke_database import create_database
from bench.invoke_drain import drained
from bench.invoke_load import Path_, gateway_path, load_client, run_load
from bench.invoke_seed import seed
from bench.invoke_stack import ROOT, Stack
from bench.procfs import proc_cpu_seconds
from core.temporal import connect
from store.db import create_engine, session_factory
from store.migrate import upgrade

BLOCK_CALLS = 240  # per c=16 block: about 3 s at the rates of docs/benchmarks.md
WARM_CALLS = 64


@dataclass
class Side:
    name: str  # "this" or "other"
    checkout: Path
    child: str  # the Stack child's name ("api", "api2": both stopped by Stack.close)
    port: int = 0
    pid: int = 0
    path: Path_ | None = None
    c1: list[list[float]] = field(default_factory=list)  # ms, request sent to last byte, per run
    # per scenario, per block: calls/s, sustained calls/s, API and dev server CPU ms per call
    blocks: dict[str, list[tuple[float, float, float, float]]] = field(default_factory=dict)


async def c1_pairs(sides: list[Side], pairs: int, run: int, pace: float, stream: bool) -> None:
    """`pairs` calls per side, in runs of `run` calls back to back, the sides taking turns (the
    order swapped every turn). One call a turn pairs each call with its neighbour. Longer runs
    keep what a call leaves behind its answer (its workflow's completion, the dev server's
    bookkeeping) on its own side's next call: a change that moves that work is only seen so. A
    run's first call follows the other side's last and is not counted. With `pace` (seconds)
    every call is sent that long after the previous one ended, as a caller with think time
    between calls would: what a call leaves behind is done before the next on either side.
    With `stream`, the calls stream and what is paired is their time to the first token."""
    for i in range(0, pairs, run):
        for side in sides if (i // run) % 2 == 0 else sides[::-1]:
            assert side.path is not None
            block = []
            for j in range(i, min(i + run, pairs)):
                if pace:
                    await asyncio.sleep(pace)  # the caller's think time, not a wait for work
                scenario = "st1" if stream else "ns1"
                sample = await side.path.call(f"pair-{side.name}-{scenario}", j, stream)
                took = sample.ttft if stream else sample.total
                assert took is not None  # a stream that gave no token failed the call
                block.append(took * 1000)
            side.c1.append(block[1:] if run > 1 else block)


async def c16_blocks(
    sides: list[Side], scenario: str, blocks: int, temporal_pid: int, client: Client
) -> None:
    """Each block's window closes once its workflows have: a change that answers sooner but
    leaves more of each workflow behind its answer would otherwise hand that work, and the dev
    server's CPU for it, to the other side's next block (seen: a variant whose answer did not wait
    for the start's reply read 6.9 against 9.5 dev server CPU ms per call without the drain, 8.5
    against 9.1 with it, 2026-12-03). The rate is the client's, over its calls alone; the
    sustained rate counts the drain too."""
    for b in range(blocks):
        for side in sides if b % 2 == 0 else sides[::-1]:
            assert side.path is not None
            api0, dev0 = proc_cpu_seconds(side.pid), proc_cpu_seconds(temporal_pid)
            tag = f"pair-{side.name}-{scenario}-{b}"
            run = await run_load(side.path, scenario, BLOCK_CALLS, tag, None)
            if run.errors:
                raise RuntimeError(f"{side.name} {scenario}: {run.errors[0]}")
            t0 = time.perf_counter()
            await drained(client)
            drain = time.perf_counter() - t0
            calls = len(run.samples)
            api = (proc_cpu_seconds(side.pid) - api0) * 1000 / calls
            dev = (proc_cpu_seconds(temporal_pid) - dev0) * 1000 / calls
            rates = (calls / run.wall, calls / (run.wall + drain))
            side.blocks.setdefault(scenario, []).append((*rates, api, dev))
            print(f"  {scenario} block {b} {side.name}: {rates[0]:.1f}/s", flush=True)


def report(sides: list[Side], scenarios: list[str], stream: bool) -> str:
    this, other = sides
    # Per turn: the other side's run against this side's (one call each, or the runs' medians).
    diffs = [
        statistics.median(b) - statistics.median(a)
        for a, b in zip(this.c1, other.c1, strict=True)
        if a and b
    ]
    lines = [
        f"this = {this.checkout}, other = {other.checkout}",
        "",
        "| | this | other |",
        "|---|---:|---:|",
    ]
    p = {s.name: sorted(x for run in s.c1 for x in run) for s in sides}
    # The tail as well as the middle: a change can move where the slow calls wait (the start's
    # reply, thirty-fourth pass) more than the median.
    cuts = {
        n: tuple(v[int(q * (len(v) - 1))] for q in (0.25, 0.5, 0.75, 0.9, 0.95))
        for n, v in p.items()
    }
    lines.append(
        f"| {'stream TTFT' if stream else 'non-stream total'} p25 / p50 / p75 / p90 / p95, c=1, "
        f"{len(p['this'])} calls each (ms) | "
        + " | ".join(" / ".join(f"{x:.2f}" for x in cuts[s.name]) for s in sides)
        + " |"
    )
    for scenario in scenarios:
        cells = []
        for side in sides:
            rows = side.blocks[scenario]
            rate, sustained, api, dev = (statistics.mean(r[i] for r in rows) for i in range(4))
            per = " / ".join(f"{r[0]:.0f}" for r in rows)
            cells.append(
                f"{rate:.1f} ({per}), {sustained:.1f}; API {api:.1f}, dev server {dev:.1f}"
            )
        lines.append(
            f"| {scenario}: calls/s, mean (blocks), sustained; CPU ms per call | "
            + " | ".join(cells)
            + " |"
        )
    what = "paired difference" if len(diffs) == len(p["this"]) else f"{len(diffs)} runs' medians"
    lines += ["", f"c=1 {what}, other - this, median: {statistics.median(diffs):+.2f} ms"]
    return "\n".join(lines)


async def measure(stack: Stack, sides: list[Side], args: argparse.Namespace) -> str:
    database_url, _ = await create_database(stack.start_postgres())
    await asyncio.to_thread(upgrade, database_url)
    temporal = stack.start_temporal()
    stack.start_upstream()
    env = stack.service_env(database_url)
    stack.start_worker(env)
    for side in sides:
        child, side.port = stack.spawn_api(side.child, env, side.checkout)
        side.pid = child.pid
    client = await connect(stack.settings(database_url))
    api = f"http://127.0.0.1:{sides[0].port}"
    endpoint = f"upstream:127.0.0.1:{stack.upstream_port}"
    token = await seed(api, session_factory(create_engine(database_url)), client, endpoint)
    for side in sides:
        side.path = gateway_path(f"gateway-{side.name}", side.port, token, load_client())
        await run_load(side.path, "ns16", WARM_CALLS, f"pair-{side.name}-warm16", None)
        await run_load(side.path, "ns1", WARM_CALLS // 2, f"pair-{side.name}-warm1", None)
    paced = f", {args.pace:g} ms apart" if args.pace else ""
    print(f"c=1: {args.pairs} calls a side, in runs of {args.run}{paced}…", flush=True)
    await c1_pairs(sides, args.pairs, args.run, args.pace / 1000, args.stream)
    for scenario in args.scenarios:
        await c16_blocks(sides, scenario, args.blocks, temporal.pid, client)
    for side in sides:
        assert side.path is not None
        await side.path.client.aclose()
    return report(sides, args.scenarios, args.stream)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("other", type=Path, help="the other checkout (e.g. a git worktree)")
    parser.add_argument("--pairs", type=int, default=300, help="c=1 calls per side")
    parser.add_argument(
        "--run", type=int, default=1, help="c=1 calls a side takes back to back before the other"
    )
    parser.add_argument(
        "--pace", type=float, default=0.0, help="ms between one c=1 call's end and the next"
    )
    parser.add_argument(
        "--stream", action="store_true", help="c=1 calls stream; their time to first token"
    )
    parser.add_argument("--blocks", type=int, default=3, help="c=16 blocks per side")
    parser.add_argument("--scenarios", default="ns16,st16", help="c=16 scenarios, comma-separated")
    parser.add_argument("--keep", action="store_true", help="keep the work dir (logs)")
    args = parser.parse_args()
    args.scenarios = [s for s in args.scenarios.split(",") if s]
    if any(conc_of(s) != 16 for s in args.scenarios):
        parser.error("--scenarios takes c=16 scenarios: ns16, st16")
    if not (args.other / "api" / "app.py").is_file():
        parser.error(f"{args.other} is not a checkout of this project")
    sides = [Side("this", ROOT, "api"), Side("other", args.other.resolve(), "api2")]
    stack = Stack()
    try:
        print(asyncio.run(measure(stack, sides, args)), flush=True)
    finally:
        stack.close(keep=args.keep)


if __name__ == "__main__":
    main()
