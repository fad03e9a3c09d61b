"""One fault run: the whole stack up (PostgreSQL, a Temporal dev server whose store is a file,
the upstream, the worker, the API), `concurrency` callers for `seconds`, and on a fixed timeline
the ordinary faults of a deployment: PostgreSQL stopped and started again, then frozen (its
processes stopped with SIGSTOP: connections open, nothing answered), the Temporal server the
same two ways, the API process killed and started again (as its supervisor would),
the standalone worker killed and started again, and the API's provider clients refreshed every
`adapter_ttl` seconds throughout. Every call is kept with its outcome (`bench/fault_calls.py`).

After the load: every receipt waited for, then every key that was not answered sent once more
with the same body (a caller's retry), then the receipts counted against the keys and the
upstream's own count of calls: no receipt left open, no key called twice."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx
from temporalio.client import Client
from temporalio.service import RPCError

from bench.fault_calls import OK, REFUSED, UNREACHABLE, Call, call
from bench.fault_injection import Fault, actions_on, timeline
from bench.fault_receipts import KEY_PREFIX, Receipts, count_receipts, undone_late_claims
from bench.invoke_config import MODEL_GATEWAY
from bench.invoke_database import create_database
from bench.invoke_seed import seed
from bench.invoke_stack import Stack
from core.schedules import HEALTH_PROBE, RECONCILER, schedule_id
from core.settings import Settings
from core.temporal import connect
from store.db import create_engine, session_factory
from store.migrate import upgrade

# Each streamed chunk 5 ms after the last: a call takes about 0.2 s at the upstream, so every
# fault finds calls on both sides of their claim, their start and their close.
CHUNK_DELAY = 0.005


@dataclass
class FaultRun:
    seconds: float
    concurrency: int
    adapter_ttl: float
    started: datetime
    faults: list[Fault]
    calls: list[Call] = field(default_factory=list)
    retries: list[Call] = field(default_factory=list)
    after_load: Receipts = field(default_factory=Receipts)
    after_retries: Receipts = field(default_factory=Receipts)
    upstream_calls: int = 0
    undone_late_claims: int = 0  # claims that landed after the API gave up on them, undone
    load: tuple[float, float] = (0.0, 0.0)
    began_wall: float = 0.0  # time.time() when the load began: receipts' clock to the load's
    swept_claims: list[float] = field(default_factory=list)  # s into the load, each swept claim


async def _inject(run: FaultRun, actions: dict[str, Callable[[], None]], t0: float) -> None:
    for fault in run.faults:
        await asyncio.sleep(max(0.0, fault.at - (time.perf_counter() - t0)))
        fault.began = time.perf_counter() - t0
        await asyncio.to_thread(actions[fault.name])
        fault.back = time.perf_counter() - t0
        print(f"{fault.name}: {fault.began:.1f}-{fault.back:.1f}s", flush=True)


async def _load(
    run: FaultRun,
    client: httpx.AsyncClient,
    url: str,
    token: str,
    actions: dict[str, Callable[[], None]],
) -> None:
    t0 = time.perf_counter()
    run.began_wall = time.time()
    end = t0 + run.seconds
    issued = 0

    async def caller(n: int) -> None:
        nonlocal issued
        stream = n % 2 == 1
        while time.perf_counter() < end:
            i = issued
            issued += 1
            got = await call(client, url, token, f"{KEY_PREFIX}{i}", i, stream, t0)
            run.calls.append(got)
            if got.outcome == REFUSED:  # a caller told to come back does, within a second
                await asyncio.sleep(min(got.retry_after or 1.0, 1.0))
            elif got.outcome == UNREACHABLE:
                await asyncio.sleep(0.1)  # the API not listening yet: a client's reconnect
            stream = not stream

    await asyncio.gather(_inject(run, actions, t0), *(caller(n) for n in range(run.concurrency)))


async def _retry(run: FaultRun, client: httpx.AsyncClient, url: str, token: str) -> None:
    """Every key not answered, sent once more with its own body: a refused key (nothing
    claimed) is called now, a claimed one replays what its receipt says."""
    slots = asyncio.Semaphore(run.concurrency)
    t0 = time.perf_counter()

    async def again(c: Call) -> None:
        async with slots:
            run.retries.append(await call(client, url, token, c.key, c.i, c.stream, t0))

    await asyncio.gather(*(again(c) for c in run.calls if c.outcome != OK))


async def _upstream_calls(port: int) -> int:
    async with httpx.AsyncClient(timeout=10) as http:
        stats = (await http.get(f"http://127.0.0.1:{port}/_admin/stats")).json()
    return int(sum(stats["models"].get(MODEL_GATEWAY, {}).values()))


async def _only_the_sweeper(settings: Settings, temporal: Client) -> None:
    """Pause the health probe and the reconciler, as an operator can: they would call the
    upstream beside the load. The sweeper stays: it is what closes a claim with no workflow."""
    for name in (HEALTH_PROBE, RECONCILER):
        handle = temporal.get_schedule_handle(schedule_id(settings, name))
        deadline = time.monotonic() + 60
        while True:  # the worker creates the schedules as it starts
            try:
                await handle.pause(note="bench_faults: only the sweeper runs")
                break
            except RPCError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)


async def _measure(
    stack: Stack, database_url: str, env: dict[str, str], run: FaultRun, temporal_db: Path
) -> None:
    settings = stack.settings(database_url)
    engine = create_engine(database_url)
    temporal = await connect(settings)
    await _only_the_sweeper(settings, temporal)
    upstream = f"http://127.0.0.1:{stack.upstream_port}"
    try:
        token = await seed(
            f"http://127.0.0.1:{stack.api_port}",
            session_factory(engine),
            temporal,
            f"upstream:127.0.0.1:{stack.upstream_port}",
        )
    finally:
        await engine.dispose()
    async with httpx.AsyncClient(timeout=10) as http:
        resp = await http.post(
            f"{upstream}/_admin/models/{MODEL_GATEWAY}", json={"chunk_delay": CHUNK_DELAY}
        )
        resp.raise_for_status()
    before = await _upstream_calls(stack.upstream_port)
    actions = actions_on(stack, env, temporal_db)
    url = f"http://127.0.0.1:{stack.api_port}/v1/chat/completions"
    # 60 s: far past every bound of the gateway's, so that a call held without an end shows
    # as dropped (a timeout) rather than waiting out the run.
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        print(f"load {run.seconds:.0f} s at c={run.concurrency}…", flush=True)
        await _load(run, client, url, token, actions)
        await count_receipts(database_url, run.after_load)
        print(f"receipts after the load: {run.after_load}", flush=True)
        await _retry(run, client, url, token)
    await count_receipts(database_url, run.after_retries)
    run.swept_claims = [at.timestamp() - run.began_wall for at in run.after_retries.swept_at]
    run.upstream_calls = await _upstream_calls(stack.upstream_port) - before


def run(seconds: float, concurrency: int, adapter_ttl: float) -> FaultRun:
    result = FaultRun(seconds, concurrency, adapter_ttl, datetime.now(UTC), timeline(seconds))
    load_start = os.getloadavg()[0]
    stack = Stack()
    try:
        print(f"work dir {stack.work}", flush=True)
        database_url, _ = asyncio.run(create_database(stack.start_postgres()))
        upgrade(database_url)
        temporal_db = stack.work / "temporal.db"
        stack.start_temporal(temporal_db)
        stack.start_upstream()
        env = stack.service_env(database_url)
        env["MODEL_ROUTER_INVOKE_ADAPTER_TTL_SECONDS"] = str(adapter_ttl)
        env["MODEL_ROUTER_SCHEDULES_ENABLED"] = "true"  # the sweeper's (_only_the_sweeper)
        stack.start_worker(env)
        stack.start_api(env)
        asyncio.run(_measure(stack, database_url, env, result, temporal_db))
        result.undone_late_claims = undone_late_claims(stack.work)
        result.load = (load_start, os.getloadavg()[0])
        return result
    finally:
        stack.close()
