"""Micro-benchmark of the invoke path's three statements on a real PostgreSQL: the catalog
version, the claim and the finalise (`store/receipt_statements.py`), through SQLAlchemy Core's
asyncio layer (`direct=False`) against straight on asyncpg (`store/asyncpg_path.py`, the
default on PostgreSQL). Per invocation: client CPU (`time.process_time`), wall time and, on
its own server, the server's CPU (every PostgreSQL process, from /proc), one invocation at a
time and 16 at once, in alternating rounds (the host's speed drifts).

    /work/wt/benchslot .venv/bin/python -m bench.bench_receipt_statements [--calls 400] [--rounds 3]

Starts its own PostgreSQL (bench/local_postgres.py, fsync off) unless
MODEL_ROUTER_BENCH_DATABASE_URL names a server; results go to docs/benchmarks.md by hand.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

from bench.own_database import own_database
from bench.procfs import children_of, proc_cpu_seconds
from domain.enums import InvocationOutcome, UsageStatus
from domain.invocation import InvocationInput, InvocationSummary, Target, invocation_id
from store.db import create_engine
from store.receipt_statements import ReceiptStatements

ARMS = ("sqlalchemy", "asyncpg")
Measured = tuple[float, float, float]  # client CPU, wall and server CPU ms per invocation


def _server_cpu(postmaster: int | None) -> float:
    """CPU seconds of the PostgreSQL server so far: the postmaster, its live backends and
    auxiliaries, and the children it reaped. 0 for a server this benchmark did not start."""
    if postmaster is None:
        return 0.0
    return proc_cpu_seconds(postmaster, reaped_children=True) + sum(
        proc_cpu_seconds(pid) for pid in children_of(postmaster)
    )


def _input(tenant: str) -> InvocationInput:
    key = f"bench-{uuid.uuid4().hex}"
    return InvocationInput(
        invocation_id=invocation_id(tenant, key),
        tenant_id=tenant,
        project_id="p",
        profile_id="chat",
        policy_decision_id=uuid.uuid4(),
        idempotency_key=key,
        request_hash="sha256:x",
        pricing_revision="none",
        caller_token="",
        caller_queue="q",
        timeout_seconds=30,
        targets=[Target(deployment_id="sim/a", provider="openai", model="m", endpoint_ref="x")],
    )


def _done(data: InvocationInput) -> InvocationSummary:
    return InvocationSummary(
        invocation_id=data.invocation_id,
        outcome=InvocationOutcome.COMPLETED,
        usage_status=UsageStatus.REPORTED,
        deployment_id="sim/a",
        input_tokens=12,
        output_tokens=34,
        latency_ms=5,
        provider_request_id="req-1",
    )


async def _one(statements: ReceiptStatements, tenant: str) -> None:
    data = _input(tenant)
    await statements.catalog_version()
    assert await statements.claim(data, "sim/a")
    assert await statements.finalize(data, _done(data))


async def _measure(
    statements: ReceiptStatements, calls: int, concurrency: int, postmaster: int | None = None
) -> Measured:
    """(client CPU ms, wall ms, server CPU ms) per invocation over `calls` invocations."""
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    left = calls

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await _one(statements, tenant)

    server = _server_cpu(postmaster)
    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    server = _server_cpu(postmaster) - server
    return cpu * 1000 / calls, wall * 1000 / calls, server * 1000 / calls


async def _run(
    url: str, calls: int, rounds: int, postmaster: int | None
) -> dict[tuple[str, int], list[Measured]]:
    engines = {arm: create_engine(url, pool_size=20, pre_ping=False) for arm in ARMS}
    arms = {arm: ReceiptStatements(engines[arm], direct=arm == "asyncpg") for arm in ARMS}
    results: dict[tuple[str, int], list[Measured]] = {}
    try:
        for arm in ARMS:  # warm-up: connections opened, statements prepared
            await _measure(arms[arm], 100, 16)
        for r in range(rounds):
            order = ARMS if r % 2 == 0 else ARMS[::-1]
            for concurrency in (1, 16):
                for arm in order:
                    got = await _measure(arms[arm], calls, concurrency, postmaster)
                    results.setdefault((arm, concurrency), []).append(got)
                    print(
                        f"round {r + 1} c={concurrency:<2} {arm:<10} "
                        f"cpu {got[0]:.3f} ms  wall {got[1]:.3f} ms  server cpu {got[2]:.3f} ms "
                        "per invocation",
                        flush=True,
                    )
    finally:
        for arm in ARMS:
            await arms[arm].aclose()
            await engines[arm].dispose()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with own_database("mr-bench-statements.") as db:
        print(f"PostgreSQL {db.version}, {args.calls} invocations a round", flush=True)
        results = asyncio.run(_run(db.url, args.calls, args.rounds, db.postmaster))
    print(
        "\n| path | c | client CPU ms / invocation (rounds) | wall ms / invocation (rounds) "
        "| server CPU ms / invocation (rounds) |"
    )
    print("|---|---:|---|---|---|")
    for (arm, concurrency), got in sorted(results.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        cpu = ", ".join(f"{c:.3f}" for c, _, _ in got)
        wall = ", ".join(f"{w:.3f}" for _, w, _ in got)
        server = ", ".join(f"{v:.3f}" for _, _, v in got)
        med = statistics.median(c for c, _, _ in got)
        server_med = statistics.median(v for _, _, v in got)
        print(
            f"| {arm} | {concurrency} | {cpu} (median {med:.3f}) | {wall} "
            f"| {server} (median {server_med:.3f}) |"
        )


if __name__ == "__main__":
    main()
