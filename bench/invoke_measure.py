"""The measured part of an invoke benchmark run, on a stack that is up: seed the catalog, check
each path end to end, warm up, run the scenarios in rounds that interleave the paths, then the
statement log, the pieces timed alone, paced calls on every path and the receipts."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass
from functools import partial
from typing import Any

import asyncpg
import httpx
from temporalio.client import Client

from bench.invoke_ceiling import Ceiling, temporal_ceiling
from bench.invoke_config import (
    FULL,
    LITELLM_KEY,
    MODEL_DIRECT,
    MODEL_LITELLM,
    PACED_CALLS,
    PROBE_CALLS,
    QUICK,
    SCENARIOS,
    WARMUP,
)
from bench.invoke_database import pg_connect, pg_sessions
from bench.invoke_drain import drained
from bench.invoke_extra import closed_receipts, extra_lines, streams_rows, workers_row
from bench.invoke_load import BenchError, Path_, Run, gateway_path, load_client, run_load
from bench.invoke_meter import Meter
from bench.invoke_probes import probe_pieces
from bench.invoke_receipts import ReceiptCheck, check_receipts
from bench.invoke_results import pct
from bench.invoke_seed import seed
from bench.invoke_server_stats import pg_statements, temporal_requests
from bench.invoke_stack import ROOT, Stack
from core.settings import Settings
from core.temporal import connect
from store.db import create_engine, session_factory


@dataclass
class Measured:
    runs: list[Run]
    probes: dict[str, list[float]]
    receipts: ReceiptCheck
    pg: dict[str, Any] | None
    temporal_per_call: dict[str, float]  # Temporal frontend requests per gateway call, ns16
    pg_connections_per_call: dict[str, float]  # scenario -> new PostgreSQL sessions per call
    extra: list[str]  # the --workers 2 and 64-stream rows (bench/invoke_extra.py)
    ceiling: Ceiling  # InvokeModel alone at c=16 (bench/invoke_ceiling.py)


async def paced_calls(paths: list[Path_], n: int) -> dict[str, list[float]]:
    """c=1 calls with think time between them, on each path in turn (a block of `n` each, so
    a path's own calls keep the gap): one every 100 ms, each call's workflow closed before the
    next starts, so what is left is one call on an otherwise idle machine; then one every
    500 ms, past INVOKE_START_OVERLAP_SECONDS (0.25 s), where the gateway's call begins once
    Temporal's health service answers (api/temporal_gate.py). Seconds per call, keyed
    `<path>_paced` and `<path>_idle`. Not CPU-bound as calls back to back are: every process
    waits idle between calls, and wakes for the next."""
    out: dict[str, list[float]] = {}
    for group, gap in (("paced", 0.1), ("idle", 0.5)):
        for p in paths:
            times = out.setdefault(f"{p.name}_{group}", [])
            for i in range(n):
                await asyncio.sleep(gap)  # the caller's think time, not a wait for work
                times.append((await p.call(group, i, False)).total)
    return out


def make_paths(
    stack: Stack, token: str, litellm_on: bool, clients: list[httpx.AsyncClient]
) -> list[Path_]:
    """Direct to the upstream, through the gateway and, when it runs, through LiteLLM."""
    upstream = f"http://127.0.0.1:{stack.upstream_port}"
    paths = [
        Path_(
            "direct",
            f"{upstream}/v1/chat/completions",
            MODEL_DIRECT,
            {"Authorization": "Bearer sk-bench-direct"},
            clients[0],
        ),
        gateway_path("gateway", stack.api_port, token, clients[1]),
    ]
    if litellm_on:
        paths.append(
            Path_(
                "litellm",
                f"http://127.0.0.1:{stack.litellm_port}/v1/chat/completions",
                MODEL_LITELLM,
                {"Authorization": f"Bearer {LITELLM_KEY}"},
                clients[2],
            )
        )
    return paths


async def warm_up(paths: list[Path_], quick: bool) -> None:
    print("warm-up…", flush=True)
    warm = {k: max(4, v // 3) for k, v in WARMUP.items()} if quick else WARMUP
    for p in paths:
        for scenario, n in warm.items():
            run = await run_load(p, scenario, n, f"warm-{scenario}", None)
            if run.errors:
                raise BenchError(f"warm-up {p.name} {scenario}: {run.errors[0]}")


def progress(r: int, scenario: str, p: Path_, run: Run) -> str:
    s = run.samples
    line = (
        f"round {r} {scenario:>4} {p.name:>8}: {len(s):5d} ok "
        f"{len(run.errors):3d} err  "
        f"p50 {pct([x.total for x in s], 0.5) * 1e3:7.2f}"
        f" ms  {len(s) / run.wall:7.1f}/s"
    )
    if scenario.startswith("st"):
        ttfts = [x.ttft for x in s if x.ttft is not None]
        line += f"  ttft p50 {pct(ttfts, 0.5) * 1e3:7.2f} ms"
    return line


async def run_rounds(
    paths: list[Path_],
    quick: bool,
    stack: Stack,
    stats_conn: asyncpg.Connection,
    meter: Meter,
    temporal: Client,
) -> tuple[list[Run], dict[str, float], dict[str, float]]:
    """Every scenario on every path, the paths interleaved (every other round in reverse order);
    also counts, for the gateway, Temporal frontend requests per call during the c=16
    non-stream runs and new PostgreSQL connections per call in each scenario."""
    counts = QUICK if quick else FULL
    rounds = 1 if quick else 2
    runs: list[Run] = []
    temporal_calls: Counter[str] = Counter()
    gateway_ns16 = 0
    new_sessions: Counter[str] = Counter()
    gateway_calls: Counter[str] = Counter()
    for r in range(rounds):
        order = paths if r % 2 == 0 else list(reversed(paths))
        for scenario in SCENARIOS:
            for p in order:
                before = (
                    temporal_requests(stack.temporal_metrics_port)
                    if p.keyed and scenario == "ns16"
                    else None
                )
                sessions_before = await pg_sessions(stats_conn) if p.keyed else 0
                settle = partial(drained, temporal) if p.keyed else None
                n = counts[scenario] // rounds
                run = await run_load(p, scenario, n, f"{scenario}-r{r}", meter, settle)
                if p.keyed:
                    await asyncio.sleep(1.2)  # backends report their stats within 1 s
                    new_sessions[scenario] += await pg_sessions(stats_conn) - sessions_before
                    gateway_calls[scenario] += len(run.samples) + len(run.errors)
                if before is not None:
                    after = temporal_requests(stack.temporal_metrics_port)
                    temporal_calls.update({k: after[k] - before.get(k, 0) for k in after})
                    gateway_ns16 += len(run.samples) + len(run.errors)
                runs.append(run)
                print(progress(r, scenario, p, run), flush=True)
    per_call = (
        {k: v / gateway_ns16 for k, v in temporal_calls.items() if v > 0} if gateway_ns16 else {}
    )
    connections = {k: new_sessions[k] / gateway_calls[k] for k in gateway_calls if gateway_calls[k]}
    return runs, per_call, connections


async def extra_rows(
    stack: Stack,
    database_url: str,
    token: str,
    quick: bool,
    litellm_on: bool,
    runs: list[Run],
    sessions: Any,
    temporal: Client,
) -> list[str]:
    """The --workers 2 row and the 64-stream row, after the main rounds (and their receipt
    check) so they change none of the numbers above."""
    counts = QUICK if quick else FULL
    mine = [r for r in runs if r.path == "gateway"]
    one = {
        sc: sum(len(r.samples) for r in mine if r.scenario == sc)
        / sum(r.wall for r in mine if r.scenario == sc)
        for sc in ("ns16", "st16")
    }
    cpu_one = {
        sc: sum(r.cpu.get("api", 0.0) for r in mine if r.scenario == sc)
        * 1000
        / max(1, sum(len(r.samples) + len(r.errors) for r in mine if r.scenario == sc))
        for sc in ("ns16", "st16")
    }
    streams = await streams_rows(stack, token, litellm_on)
    row, path = await workers_row(stack, stack.service_env(database_url), token, counts)
    await drained(temporal)  # the last workflows close
    row.closed, _ = await closed_receipts(sessions, list(path.sent))
    s64 = [k for r in streams for k in r.keys]
    closed64, _ = await closed_receipts(sessions, s64)
    lines = extra_lines(row, one, streams, cpu_one)
    lines.append("")
    lines.append(f"Receipts of the 64 gateway streams: {closed64} closed of {len(s64)}.")
    return lines


async def temporal_alone(stack: Stack, database_url: str, quick: bool) -> Ceiling:
    """The rate to read c=16 against (bench/invoke_ceiling.py), right after the c=16 rounds (the
    same host), on a dev server of its own: fresh, as the stack's was when the rounds began,
    and leaving the stack's server without a thousand more executions for what follows."""
    print("the workflow alone at c=16…", flush=True)
    server, port = await asyncio.to_thread(stack.start_spare_temporal)
    try:
        env = stack.service_env(database_url)
        env["MODEL_ROUTER_TEMPORAL_ADDRESS"] = f"127.0.0.1:{port}"
        return await temporal_ceiling(
            env,
            str(ROOT),
            server.pid,
            rounds=1 if quick else 2,
            calls=160 if quick else FULL["ns16"],
        )
    finally:
        await asyncio.to_thread(stack.stop_child, server)


async def measure(
    stack: Stack,
    settings: Settings,
    database_url: str,
    quick: bool,
    litellm_on: bool,
    meter: Meter,
) -> Measured:
    engine = create_engine(database_url)
    sessions = session_factory(engine)
    temporal = await connect(settings)
    stats_conn = await pg_connect(database_url)
    upstream = f"http://127.0.0.1:{stack.upstream_port}"
    api = f"http://127.0.0.1:{stack.api_port}"
    try:
        token = await seed(api, sessions, temporal, f"upstream:127.0.0.1:{stack.upstream_port}")
        clients = [load_client() for _ in range(3)]
        paths = make_paths(stack, token, litellm_on, clients)
        try:
            for p in paths:  # one call each: the path works end to end
                await p.call("check", 0, False)
                await p.call("check", 1, True)
            await warm_up(paths, quick)
            runs, per_call, connections = await run_rounds(
                paths, quick, stack, stats_conn, meter, temporal
            )
            ceiling = await temporal_alone(stack, database_url, quick)
            print("where the time goes…", flush=True)
            gateway = paths[1]
            pg = await pg_statements(stack, gateway, 20 if not quick else 5)
            probes = await probe_pieces(
                PROBE_CALLS if not quick else 40,
                stack,
                settings,
                sessions,
                database_url,
                token,
            )
            probes.update(await paced_calls(paths, PACED_CALLS if not quick else 20))
            await drained(temporal)  # the last workflows close before the receipts are counted
            check = await check_receipts(sessions, gateway, upstream)
            extra = await extra_rows(
                stack, database_url, token, quick, litellm_on, runs, sessions, temporal
            )
            return Measured(runs, probes, check, pg, per_call, connections, extra, ceiling)
        finally:
            for c in clients:
                await c.aclose()
    finally:
        await stats_conn.close()
        await engine.dispose()
