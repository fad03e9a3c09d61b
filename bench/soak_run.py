"""One soak run: the whole stack up (PostgreSQL, Temporal, upstream, worker, API), `concurrency`
callers for `minutes` (alternating streamed and non-streamed calls, every call its own
Idempotency-Key), then every receipt waited for and counted against the calls and the upstream's
own count. The API's provider clients are refreshed every `adapter_ttl` seconds, so the soak
crosses several refreshes (issue 19: one cut 14 streams at +300 s). RSS of the API, the worker
and the Temporal dev server is kept over time, so memory that grows with the calls (a leak) can
be told from memory that settles."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

import httpx
from sqlalchemy import func, select
from sqlmodel import col

from bench.invoke_config import MODEL_GATEWAY, TENANT
from bench.invoke_database import create_database
from bench.invoke_load import Path_, gateway_path, load_client
from bench.invoke_meter import Meter
from bench.invoke_seed import seed
from bench.invoke_stack import Stack
from core.settings import Settings
from core.temporal import connect
from store.db import create_engine, session_factory
from store.migrate import upgrade
from store.tables import InvocationReceiptRow


@dataclass
class Call:
    at: float  # seconds since the soak began, when the call was sent
    total: float | None  # seconds, None when it failed
    stream: bool
    error: str | None = None


@dataclass
class Soak:
    minutes: float
    concurrency: int
    adapter_ttl: float
    started: datetime
    calls: list[Call] = field(default_factory=list)
    rss: dict[str, tuple[int, int, int, int]] = field(default_factory=dict)
    # name -> (seconds since the soak began, RSS KiB), every sample of the run
    rss_timeline: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    began: float = 0.0  # time.monotonic() when the first call was sent
    receipts: int = 0
    closed: int = 0
    upstream_calls: int = 0
    load: tuple[float, float] = (0.0, 0.0)


async def _load(path: Path_, soak: Soak) -> None:
    t0 = time.perf_counter()
    soak.began = time.monotonic()
    end = t0 + soak.minutes * 60
    issued = 0

    async def caller(n: int) -> None:
        nonlocal issued
        stream = n % 2 == 1
        while time.perf_counter() < end:
            i = issued
            issued += 1
            at = time.perf_counter() - t0
            try:
                sample = await path.call("soak", i, stream)
                soak.calls.append(Call(at, sample.total, stream))
            except Exception as exc:  # every failure is counted and reported
                soak.calls.append(Call(at, None, stream, f"{type(exc).__name__}: {exc}"[:200]))
            stream = not stream

    await asyncio.gather(*(caller(n) for n in range(soak.concurrency)))


async def _receipts(database_url: str, soak: Soak, upstream: str) -> None:
    engine = create_engine(database_url)
    sessions = session_factory(engine)
    base = (
        select(func.count())
        .select_from(InvocationReceiptRow)
        .where(col(InvocationReceiptRow.tenant_id) == TENANT)
        .where(col(InvocationReceiptRow.idempotency_key).like("bench-gw-soak-%"))
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            async with sessions() as session:
                soak.receipts = await session.scalar(base) or 0
                soak.closed = (
                    await session.scalar(
                        base.where(col(InvocationReceiptRow.ended_at).is_not(None))
                    )
                    or 0
                )
            if soak.closed == soak.receipts or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)  # a poll interval while the last workflows close
    finally:
        await engine.dispose()
    async with httpx.AsyncClient(timeout=10) as http:
        stats = (await http.get(f"{upstream}/_admin/stats")).json()
    soak.upstream_calls = sum(stats["models"].get(MODEL_GATEWAY, {}).values())


async def _measure(stack: Stack, settings: Settings, database_url: str, soak: Soak) -> None:
    engine = create_engine(database_url)
    temporal = await connect(settings)
    api = f"http://127.0.0.1:{stack.api_port}"
    upstream = f"http://127.0.0.1:{stack.upstream_port}"
    try:
        token = await seed(
            api, session_factory(engine), temporal, f"upstream:127.0.0.1:{stack.upstream_port}"
        )
    finally:
        await engine.dispose()
    async with load_client(timeout=120) as client:
        path = gateway_path("gateway", stack.api_port, token, client)
        await _load(path, soak)
    await _receipts(database_url, soak, upstream)


def run(minutes: float, concurrency: int, adapter_ttl: float) -> Soak:
    soak = Soak(minutes, concurrency, adapter_ttl, datetime.now(UTC))
    load_start = os.getloadavg()[0]
    stack = Stack()
    meter = Meter(stack, ("api", "worker", "temporal"))
    try:
        print(f"work dir {stack.work}", flush=True)
        database_url, _ = asyncio.run(create_database(stack.start_postgres()))
        upgrade(database_url)
        stack.start_temporal()
        stack.start_upstream()
        env = stack.service_env(database_url)
        env["MODEL_ROUTER_INVOKE_ADAPTER_TTL_SECONDS"] = str(adapter_ttl)
        stack.start_worker(env)
        stack.start_api(env)
        settings = stack.settings(database_url)
        meter.start()
        print(f"soaking {minutes} min at c={concurrency}…", flush=True)
        asyncio.run(_measure(stack, settings, database_url, soak))
        meter.stop()
        soak.rss = meter.rss()
        soak.rss_timeline = {
            name: [(at - soak.began, rss) for at, rss in samples]
            for name, samples in meter.rss_timeline.items()
        }
        soak.load = (load_start, os.getloadavg()[0])
        return soak
    finally:
        meter.stop()
        stack.close()
