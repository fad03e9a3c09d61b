"""How long Temporal's answers take after the machine idled: an eager workflow start (to its
reply, and to the workflow's result through one local activity) and a bare health check, back to
back and with 100 ms and 500 ms of think time before each, on a fresh dev server with the
project's switches and a worker in this process.

Run: .venv/bin/python bench/start_after_idle.py [--calls 30] [--rounds 3]

Why: a gateway call paced 100 ms apart took longer than one back to back (docs/benchmarks.md,
twenty-first pass), although back to back the cores are saturated and paced they idle. Nothing
here is the gateway's: the same answers slow down with nothing but Temporal and this process
running, so what paced calls pay is every process waking for each call. Prints p50s; writes
nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.invoke_stack import Stack

QUEUE = "start-after-idle"
GAPS = (("back to back", 0.0), ("100 ms apart", 0.1), ("500 ms apart", 0.5))


@activity.defn
async def echo(x: str) -> str:
    return x


@workflow.defn
class Echo:
    @workflow.run
    async def run(self, x: str) -> str:
        return await workflow.execute_local_activity(
            echo, x, start_to_close_timeout=timedelta(seconds=5)
        )


async def connected(address: str) -> Client:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            client = await Client.connect(address)
            if await client.service_client.check_health():
                return client
        except Exception:
            pass
        await asyncio.sleep(0.2)  # the server is still coming up: poll
    raise SystemExit(f"no dev server on {address}")


async def one_start(client: Client) -> tuple[float, float]:
    """ms to the start's reply, and to the workflow's result."""
    t0 = time.perf_counter()
    handle = await client.start_workflow(
        Echo.run, "x", id=f"idle-{uuid.uuid4()}", task_queue=QUEUE, request_eager_start=True
    )
    t1 = time.perf_counter()
    await handle.result()
    return (t1 - t0) * 1000, (time.perf_counter() - t0) * 1000


async def one_check(client: Client) -> float:
    t0 = time.perf_counter()
    await client.service_client.check_health()
    return (time.perf_counter() - t0) * 1000


async def measure(client: Client, calls: int, rounds: int) -> None:
    replies: dict[str, list[float]] = {}
    results: dict[str, list[float]] = {}
    checks: dict[str, list[float]] = {}
    for _ in range(50):  # warm-up
        await one_start(client)
    for _ in range(rounds):  # the gaps interleaved, so each sees the same neighbours
        for label, gap in GAPS:
            for _ in range(calls):
                if gap:
                    await asyncio.sleep(gap)  # think time, not a wait for work
                reply, result = await one_start(client)
                replies.setdefault(label, []).append(reply)
                results.setdefault(label, []).append(result)
            for _ in range(calls):
                if gap:
                    await asyncio.sleep(gap)
                checks.setdefault(label, []).append(await one_check(client))
    print("| | eager start, reply | …to the result | health check |")
    print("|---|---:|---:|---:|")
    for label, _ in GAPS:
        cells = (statistics.median(v[label]) for v in (replies, results, checks))
        print(f"| {label} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")


async def run(address: str, calls: int, rounds: int) -> None:
    client = await connected(address)
    async with Worker(
        client,
        task_queue=QUEUE,
        workflows=[Echo],
        activities=[echo],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        await measure(client, calls, rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=30, help="calls per gap and round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds over the three gaps")
    args = parser.parse_args()
    stack = Stack()  # only its dev server: the benchmark's, with the project's switches
    try:
        stack.start_temporal()
        asyncio.run(run(f"127.0.0.1:{stack.temporal_port}", args.calls, args.rounds))
    finally:
        stack.close()


if __name__ == "__main__":
    main()
