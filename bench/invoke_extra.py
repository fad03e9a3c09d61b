"""The invoke benchmark's two further rows, on the stack of the same run, after the main rounds:

- `model-router api --workers 2`: a second API (two processes, each with its own in-process
  invocation workers and caller queue) measured at c=16, non-stream and stream, with the CPU of
  its whole process tree;
- 64 concurrent streams of ~300 chunks at ~10 ms a chunk from the simulator (its per-model
  `chunk_delay`), directly, through model-router and through LiteLLM: the gap between
  consecutive chunks as the client receives them (each path's p50 and p99, and what it adds
  over the direct path), streams with a gap over 250 ms (stalled), the CPU per chunk of the
  gateway's processes and their RSS under that load.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col, func, select

from bench.child_process import http_ok
from bench.invoke_config import (
    LITELLM_KEY,
    MODEL_DIRECT,
    MODEL_GATEWAY,
    MODEL_LITELLM,
    PROFILE,
    TENANT,
)
from bench.invoke_load import (
    Path_,
    Run,
    gateway_path,
    load_client,
    run_load,
    settle_client_heap,
)
from bench.invoke_results import pct
from bench.invoke_stack import Stack
from bench.procfs import children_of, proc_cpu_seconds, proc_rss_kib
from core.local_ports import free_port
from store.tables import InvocationReceiptRow

STREAMS = 64
WORDS = 300  # the simulator streams one word per chunk: ~300 tokens
CHUNK_DELAY = 0.010
STALL_S = 0.250


def tree(pid: int) -> list[int]:
    found = [pid]
    for child in children_of(pid):
        found += tree(child)
    return found


def cpu_of(pids: list[int]) -> float:
    return sum(proc_cpu_seconds(p) for p in pids)


def start_api_workers(stack: Stack, env: dict[str, str], workers: int) -> tuple[int, int]:
    """`model-router api --workers N` on a port of its own; returns (port, master pid)."""
    port = free_port()
    child = stack.spawn(
        "api2",
        [
            sys.executable,
            "-c",
            "from cli.main import app; app()",
            "api",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            str(workers),
        ],
        env,
    )
    url = f"http://127.0.0.1:{port}/readyz"

    def ready() -> bool:
        # Every process must be up (its own Temporal workers included): ask a few times.
        return all(http_ok(url) for _ in range(workers * 4))

    stack.wait_until(ready, f"API --workers {workers}", child, 120)
    return port, child.pid


@dataclass
class WorkersRow:
    workers: int
    runs: dict[str, Run]
    cpu_ms_per_call: dict[str, float]
    closed: int
    sent: int


async def workers_row(
    stack: Stack, env: dict[str, str], token: str, counts: dict[str, int], workers: int = 2
) -> tuple[WorkersRow, Path_]:
    port, master = await asyncio.to_thread(start_api_workers, stack, env, workers)
    client = load_client()
    path = gateway_path(f"gateway-{workers}w", port, token, client)
    runs: dict[str, Run] = {}
    cpu: dict[str, float] = {}
    try:
        for scenario in ("ns16", "st16"):
            await run_load(path, scenario, max(16, counts[scenario] // 4), f"w{workers}-warm", None)
            pids = tree(master)
            before = cpu_of(pids)
            run = await run_load(path, scenario, counts[scenario], f"w{workers}-{scenario}", None)
            spent = cpu_of(pids) - before
            runs[scenario] = run
            calls = len(run.samples) + len(run.errors)
            cpu[scenario] = spent * 1000 / calls if calls else float("nan")
            print(
                f"--workers {workers} {scenario}: {len(run.samples)} ok {len(run.errors)} err "
                f"{len(run.samples) / run.wall:.1f}/s, API CPU {cpu[scenario]:.1f} ms/call",
                flush=True,
            )
    finally:
        await client.aclose()
    return WorkersRow(workers, runs, cpu, 0, len(path.sent)), path


async def closed_receipts(
    sessions: async_sessionmaker[AsyncSession], keys: list[str]
) -> tuple[int, int]:
    """(receipts closed, receipts found) among these idempotency keys."""
    if not keys:
        return 0, 0
    async with sessions() as session:
        mine = col(InvocationReceiptRow.idempotency_key).in_(keys)
        tenant = col(InvocationReceiptRow.tenant_id) == TENANT
        found = await session.scalar(select(func.count()).where(tenant, mine))
        closed = await session.scalar(
            select(func.count()).where(
                tenant, mine, col(InvocationReceiptRow.ended_at).is_not(None)
            )
        )
    return int(closed or 0), int(found or 0)


@dataclass
class StreamsRow:
    path: str
    streams: int
    errors: list[str]
    gaps_ms: list[float]
    stalled: int
    # Streams whose gap over the stall bound came only after their first 10 output reads: a
    # stall while streaming, not while 63 other calls were being set up.
    stalled_later: int
    chunks: int
    cpu_ms_per_chunk: float | None
    rss_peak_mib: float | None
    wall: float
    keys: list[str] = field(default_factory=list)

    @property
    def p50(self) -> float:
        return pct(self.gaps_ms, 0.5)

    @property
    def p99(self) -> float:
        return pct(self.gaps_ms, 0.99)


def long_prompt(i: int) -> str:
    return f"stream {i}: " + " ".join(f"w{n % 97}" for n in range(WORDS))


async def one_stream(
    client: httpx.AsyncClient, url: str, model: str, headers: dict[str, str], i: int
) -> tuple[list[float], int]:
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": long_prompt(i)}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    arrivals: list[float] = []
    chunks = 0
    done = False
    async with client.stream("POST", url, json=body, headers=headers) as resp:
        if resp.status_code != 200:
            await resp.aread()
            raise RuntimeError(f"HTTP {resp.status_code} {resp.text[:200]}")
        async for data in resp.aiter_bytes():
            # What the client sees: when bytes with content arrive (one read may hold several
            # events; the gap is between reads that carry output).
            n = data.count(b'"content":"') - data.count(b'"content":""')
            if n > 0:
                arrivals.append(time.perf_counter())
                chunks += n
            if b"[DONE]" in data:
                done = True
    if not done:
        raise RuntimeError("stream ended without [DONE]")
    gaps = [(b - a) * 1000 for a, b in itertools.pairwise(arrivals)]
    return gaps, chunks


async def streams_row(
    name: str, url: str, model: str, headers: dict[str, str], pids: list[int], keyed: bool
) -> StreamsRow:
    keys: list[str] = []
    rss_peak = 0
    stop = asyncio.Event()

    async def sample_rss() -> None:
        nonlocal rss_peak
        while not stop.is_set():
            rss_peak = max(rss_peak, sum(proc_rss_kib(p)[0] for p in pids) if pids else 0)
            await asyncio.sleep(0.1)

    async with load_client(timeout=120, connections=STREAMS) as client:

        async def call(i: int) -> tuple[list[float], int]:
            h = headers
            if keyed:
                key = f"bench-s64-{name}-{i}-{time.time_ns()}"
                keys.append(key)
                h = {**headers, "Idempotency-Key": key}
            return await one_stream(client, url, model, h, i)

        await asyncio.gather(*(call(-1 - i) for i in range(4)))  # warm the connections
        keys.clear()
        settle_client_heap()
        before = cpu_of(pids)
        sampler = asyncio.create_task(sample_rss())
        t0 = time.perf_counter()
        results = await asyncio.gather(*(call(i) for i in range(STREAMS)), return_exceptions=True)
        wall = time.perf_counter() - t0
        stop.set()
        await sampler
        spent = cpu_of(pids) - before
    gaps: list[float] = []
    errors: list[str] = []
    stalled = stalled_later = chunks = 0
    for r in results:
        if isinstance(r, BaseException):
            errors.append(f"{type(r).__name__}: {str(r)[:200]}")
            continue
        g, n = r
        gaps += g
        chunks += n
        stalled += any(x > STALL_S * 1000 for x in g)
        stalled_later += any(x > STALL_S * 1000 for x in g[10:])
    row = StreamsRow(
        name,
        STREAMS,
        errors,
        gaps,
        stalled,
        stalled_later,
        chunks,
        spent * 1000 / chunks if pids and chunks else None,
        rss_peak / 1024 if pids else None,
        wall,
        keys,
    )
    print(
        f"64 streams {name}: {STREAMS - len(errors)} ok, gaps p50 {row.p50:.1f} p99 "
        f"{row.p99:.1f} ms, {stalled} stalled ({stalled_later} after their first 10 reads), "
        f"{chunks} chunks in {wall:.1f} s",
        flush=True,
    )
    return row


async def streams_rows(stack: Stack, token: str, litellm_on: bool) -> list[StreamsRow]:
    upstream = f"http://127.0.0.1:{stack.upstream_port}"
    async with httpx.AsyncClient(timeout=10) as http:
        for model in (MODEL_DIRECT, MODEL_GATEWAY, MODEL_LITELLM):
            resp = await http.post(
                f"{upstream}/_admin/models/{model}", json={"chunk_delay": CHUNK_DELAY}
            )
            resp.raise_for_status()
    api = stack.child("api")
    rows = [
        await streams_row(
            "direct",
            f"{upstream}/v1/chat/completions",
            MODEL_DIRECT,
            {"Authorization": "Bearer sk-bench-direct"},
            [],
            False,
        ),
        await streams_row(
            "model-router",
            f"http://127.0.0.1:{stack.api_port}/v1/chat/completions",
            PROFILE,
            {"Authorization": f"Bearer {token}"},
            tree(api.pid) if api else [],
            True,
        ),
    ]
    litellm = stack.child("litellm")
    if litellm_on and litellm is not None:
        rows.append(
            await streams_row(
                "litellm",
                f"http://127.0.0.1:{stack.litellm_port}/v1/chat/completions",
                MODEL_LITELLM,
                {"Authorization": f"Bearer {LITELLM_KEY}"},
                tree(litellm.pid),
                False,
            )
        )
    async with httpx.AsyncClient(timeout=10) as http:
        for model in (MODEL_DIRECT, MODEL_GATEWAY, MODEL_LITELLM):
            await http.post(f"{upstream}/_admin/models/{model}", json={"chunk_delay": 0.0})
    return rows


def extra_lines(
    row: WorkersRow, one: dict[str, float], streams: list[StreamsRow], cpu_one: dict[str, float]
) -> list[str]:
    """The docs lines of both rows. `one`: the single-process gateway's c=16 calls/s per
    scenario, `cpu_one` its API CPU ms per call, from the main rounds of the same run."""
    ns, st = row.runs["ns16"], row.runs["st16"]
    lines = [
        f"`model-router api --workers {row.workers}` (same run, same database and Temporal; "
        "each process has its own in-process invocation workers and caller queue), c=16:",
        "",
        f"| | 1 API process | {row.workers} API processes |",
        "|---|---:|---:|",
        f"| throughput, non-stream (calls/s) | {one['ns16']:.0f} | "
        f"{len(ns.samples) / ns.wall:.0f} |",
        f"| throughput, stream (calls/s) | {one['st16']:.0f} | {len(st.samples) / st.wall:.0f} |",
        f"| non-stream total p50 (ms) | — | {pct([s.total for s in ns.samples], 0.5) * 1e3:.1f} |",
        f"| API CPU ms per call, non-stream / stream | {cpu_one['ns16']:.1f} / "
        f"{cpu_one['st16']:.1f} | {row.cpu_ms_per_call['ns16']:.1f} / "
        f"{row.cpu_ms_per_call['st16']:.1f} |",
        f"| errors | — | {len(ns.errors) + len(st.errors)} |",
        f"| durable receipts | — | {row.closed:,} closed of {row.sent:,} calls |",
        "",
        f"{STREAMS} concurrent streams of ~{WORDS} chunks at {CHUNK_DELAY * 1000:.0f} ms a chunk "
        "from the simulator (the gap is between reads that carry output, at the client; "
        f"stalled: a gap over {STALL_S * 1000:.0f} ms):",
        "",
        "| | streams ok | gap p50 / p99 / max (ms) | added over direct p50 / p99 | stalled "
        "(of them after their first 10 reads) | CPU µs per chunk | RSS MiB under load |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    direct = next((r for r in streams if r.path == "direct"), None)
    for r in streams:
        added = (
            f"{r.p50 - direct.p50:+.1f} / {r.p99 - direct.p99:+.1f}"
            if direct is not None and r is not direct
            else "—"
        )
        cpu = f"{r.cpu_ms_per_chunk * 1000:.0f}" if r.cpu_ms_per_chunk is not None else "—"
        rss = f"{r.rss_peak_mib:.0f}" if r.rss_peak_mib is not None else "—"
        lines.append(
            f"| {r.path} | {r.streams - len(r.errors)} of {r.streams} | {r.p50:.1f} / "
            f"{r.p99:.1f} / {max(r.gaps_ms, default=0):.0f} | {added} | {r.stalled} "
            f"({r.stalled_later}) | {cpu} | {rss} |"
        )
    errors = [e for r in streams for e in r.errors[:1]]
    if errors:
        lines += ["", "First stream errors: " + "; ".join(errors)]
    return lines
