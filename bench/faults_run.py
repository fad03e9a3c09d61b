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
import contextlib
import os
import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx
from sqlalchemy import extract, func, select
from sqlmodel import col
from temporalio.client import Client
from temporalio.service import RPCError

from bench.fault_calls import OK, REFUSED, UNREACHABLE, Call, call
from bench.invoke_config import MODEL_GATEWAY, TENANT
from bench.invoke_database import create_database
from bench.invoke_seed import seed
from bench.invoke_stack import Stack
from core.schedules import HEALTH_PROBE, RECONCILER, schedule_id
from core.settings import Settings
from core.temporal import connect
from store.db import create_engine, session_factory
from store.migrate import upgrade
from store.tables import InvocationReceiptRow

KEY_PREFIX = "bench-fault-"
# How long PostgreSQL and Temporal stay down: the fault tests' outage, an ordinary blip.
OUTAGE_SECONDS = 5.0
# How long they stay frozen: twice the gateway's bounds on waiting for either
# (`INVOKE_STORE_WAIT_SECONDS`, `INVOKE_START_WAIT_SECONDS`, 5 s each), so that the bounds, not
# the end of the freeze, are what end the waits. (A 5 s freeze in a quick run was absorbed:
# the calls under way finished as it ended, and one was refused, at 5,006 ms.)
FREEZE_SECONDS = 10.0
# Each streamed chunk 5 ms after the last: a call takes about 0.2 s at the upstream, so every
# fault finds calls on both sides of their claim, their start and their close.
CHUNK_DELAY = 0.005
# The bound on waiting for every receipt to close after the load. The workflows retry a close
# the store refused at most 10 s apart, and a call on the killed API is closed by its workflow
# on the worker. A call claimed on the killed API whose start Temporal had not yet accepted has
# no workflow: the receipt sweeper closes it, on its production settings (every minute, open
# past the start's 5 s bound and a 25 s margin), so about 30-90 s after its claim; any other
# receipt a workflow left open waits out the budget and the grace (250 s), hence this bound.
CLOSE_WAIT_SECONDS = 360.0


@dataclass
class Fault:
    name: str
    at: float  # seconds into the load when it is done
    began: float = 0.0  # seconds into the load: when the part went away
    back: float = 0.0  # …and when it was back (ready again)


@dataclass
class Receipts:
    total: int = 0
    closed: int = 0
    by_outcome: dict[str, int] = field(default_factory=dict)  # "Completed / Reported" -> n
    by_reason: dict[str, int] = field(default_factory=dict)  # close reason -> n
    closed_after: float | None = None  # seconds after the load until the last one closed
    # close reason -> the longest any receipt closed so stayed open, claim to close (s)
    longest_open: dict[str, float] = field(default_factory=dict)
    # the swept receipts' claims (not in the progress line: one timestamp each)
    swept_at: list[datetime] = field(default_factory=list, repr=False)


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


FAULTS = (
    "PostgreSQL stopped",
    "PostgreSQL frozen",
    "Temporal stopped",
    "Temporal frozen",
    "API killed",
    "worker killed",
)


def timeline(seconds: float) -> list[Fault]:
    """The faults spread evenly over the load, each `seconds / (n + 1)` after the last."""
    step = seconds / (len(FAULTS) + 1)
    return [Fault(name, step * (n + 0.6)) for n, name in enumerate(FAULTS)]


def _frozen(pids: Callable[[], list[int]]) -> None:
    """Stop the processes (SIGSTOP) for the outage, then let them go on: a server that holds
    its connections open and answers nothing — a VM paused, a network partition, a long GC —
    which only the gateway's own bounds can end, no refused connection telling it so."""
    stopped = pids()
    for pid in stopped:
        os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(FREEZE_SECONDS)
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def _actions(stack: Stack, env: dict[str, str], temporal_db: Path) -> dict[str, Callable[[], None]]:
    assert stack.postgres is not None
    postgres = stack.postgres

    def postgres_stopped() -> None:
        postgres.stop("fast")  # every session cut, as a restart or a failover does
        time.sleep(OUTAGE_SECONDS)  # the outage's length, in a thread of its own
        postgres.restart()

    def temporal_pids() -> list[int]:
        child = stack.child("temporal")
        assert child is not None
        return [child.pid]

    def temporal_stopped() -> None:
        stack.retire("temporal")
        time.sleep(OUTAGE_SECONDS)
        stack.start_temporal(temporal_db)

    def api() -> None:
        stack.retire("api", kill=True)
        stack.spawn_api("api", env, port=stack.api_port)

    def worker() -> None:
        stack.retire("worker", kill=True)
        stack.start_worker(env)

    actions = {
        "PostgreSQL stopped": postgres_stopped,
        "PostgreSQL frozen": lambda: _frozen(postgres.pids),
        "Temporal stopped": temporal_stopped,
        "Temporal frozen": lambda: _frozen(temporal_pids),
        "API killed": api,
        "worker killed": worker,
    }
    assert tuple(actions) == FAULTS
    return actions


def undone_late_claims(work: Path) -> int:
    """How many claims the API processes undid after they landed late (api/given_up_claims.py),
    from their logs (the killed one's included)."""
    return sum(
        int(found)
        for log in work.glob("api*.log")
        for found in re.findall(r"undid (\d+) claims that landed", log.read_text(errors="replace"))
    )


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


async def _receipts(database_url: str, into: Receipts) -> None:
    """Wait (bounded) until every receipt of the run is closed, then count them."""
    engine = create_engine(database_url)
    sessions = session_factory(engine)
    receipt = InvocationReceiptRow
    ours = col(receipt.idempotency_key).like(f"{KEY_PREFIX}%")
    mine = (col(receipt.tenant_id) == TENANT) & ours
    ended = col(receipt.ended_at).is_not(None)
    groups = (col(receipt.outcome), col(receipt.usage_status), col(receipt.close_reason), ended)
    waited = time.monotonic()
    try:
        while True:
            async with sessions() as session:
                rows = (
                    await session.execute(
                        select(*groups, func.count()).where(mine).group_by(*groups)
                    )
                ).all()
            into.total = sum(n for *_, n in rows)
            into.closed = sum(n for *_, is_closed, n in rows if is_closed)
            if into.closed == into.total:
                into.closed_after = time.monotonic() - waited
                break
            if time.monotonic() - waited > CLOSE_WAIT_SECONDS:
                break
            await asyncio.sleep(0.5)  # a poll interval while the last workflows close
        async with sessions() as session:
            spans = (
                await session.execute(
                    select(
                        col(receipt.close_reason),
                        func.max(extract("epoch", col(receipt.ended_at) - col(receipt.started_at))),
                    )
                    .where(mine & ended)
                    .group_by(col(receipt.close_reason))
                )
            ).all()
        into.longest_open = {reason or "—": float(span) for reason, span in spans}
        async with sessions() as session:
            into.swept_at = list(
                (
                    await session.scalars(
                        select(col(receipt.started_at)).where(
                            mine & (col(receipt.close_reason) == "swept")
                        )
                    )
                ).all()
            )
    finally:
        await engine.dispose()
    into.by_outcome, into.by_reason = {}, {}
    for outcome, usage, reason, is_closed, n in rows:
        what = f"{outcome} / usage {usage}" if is_closed else "open"
        into.by_outcome[what] = into.by_outcome.get(what, 0) + n
        if is_closed:
            into.by_reason[reason or "—"] = into.by_reason.get(reason or "—", 0) + n


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
    actions = _actions(stack, env, temporal_db)
    url = f"http://127.0.0.1:{stack.api_port}/v1/chat/completions"
    # 60 s: far past every bound of the gateway's, so that a call held without an end shows
    # as dropped (a timeout) rather than waiting out the run.
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        print(f"load {run.seconds:.0f} s at c={run.concurrency}…", flush=True)
        await _load(run, client, url, token, actions)
        await _receipts(database_url, run.after_load)
        print(f"receipts after the load: {run.after_load}", flush=True)
        await _retry(run, client, url, token)
    await _receipts(database_url, run.after_retries)
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
