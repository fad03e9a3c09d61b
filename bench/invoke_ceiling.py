"""The Temporal ceiling of c=16 throughput on this machine: InvokeModel started and completed as
fast as one process can drive it, 16 at a time, with nothing else per invocation — no HTTP, no
database, no provider call, the `call_provider` local activity a stub that answers at once.

It runs on a fresh dev server (the benchmark starts one for it), in a process of its own set up
as the API is (uvloop, the start-up heap frozen, `core/gc_tuning.py`), on a worker built as the
API builds its own (the product's unsandboxed runner, activations inline on the event loop, 256
workflow-task slots, eager start; USE_EXISTING, where the API's first send now says
TERMINATE_EXISTING: the two differ only when a run is already going under the id, and the
ids here are fresh). As in the API, nothing waits on a workflow's
result: each of the 16 lanes starts the next invocation once the local activity has run, and
the workflows complete behind them; a round ends when none is left running. Every gateway
invocation does all of this and more on the same two cores (the request, the receipt's two
statements, the provider call), and on a server with the history of the runs before it,
so while the machine is the bottleneck the gateway's c=16 throughput cannot pass this rate. The
c=16 non-stream target against LiteLLM's proxy is read next to it.

Run by the benchmark (`temporal_ceiling`); by hand: python -m bench.invoke_ceiling --server-pid
PID (the Temporal address from MODEL_ROUTER_TEMPORAL_ADDRESS), one JSON line on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from dataclasses import asdict, dataclass

from temporalio import activity
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.worker import Worker

from activities.invoke_setup import INVOKE_WORKFLOW_RUNNER, InlineWorkflowTasks
from bench.invoke_drain import drained
from bench.probe_input import probe_input
from bench.procfs import proc_cpu_seconds
from core import gc_tuning
from core.settings import Settings
from core.temporal import connect
from domain.invocation import Disposition, InvocationInput, InvocationSummary, Target
from workflows.invoke import InvokeModelWorkflow

CONCURRENCY = 16


@dataclass
class Ceiling:
    rates: list[float]  # invocations completed a second, per round
    process_cpu_ms: float  # per invocation, in the starting process (client, worker, Rust core)
    server_cpu_ms: float  # per invocation, in the dev server

    @property
    def rate(self) -> float:
        return statistics.median(self.rates)


async def temporal_ceiling(
    env: dict[str, str], cwd: str, server_pid: int, rounds: int, calls: int
) -> Ceiling:
    """Run the measurement in its own process (below) and read its line."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.invoke_ceiling",
        "--server-pid",
        str(server_pid),
        "--rounds",
        str(rounds),
        "--calls",
        str(calls),
        env=env,
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"bench.invoke_ceiling exited with {proc.returncode}")
    return Ceiling(**json.loads(out.decode().strip().splitlines()[-1]))


# Never called: the local activity is a stub.
_UNUSED = Target(deployment_id="bench/none", provider="openai", model="none", endpoint_ref="env:X")


async def _measure(client: Client, server_pid: int, rounds: int, calls: int) -> Ceiling:
    queue = f"bench-ceiling-{uuid.uuid4().hex[:8]}"
    ran: dict[uuid.UUID, asyncio.Event] = {}

    @activity.defn(name="call_provider")
    async def answered(data: InvocationInput) -> InvocationSummary:
        event = ran.pop(data.invocation_id, None)
        if event is not None:
            event.set()
        return InvocationSummary(invocation_id=data.invocation_id, disposition=Disposition.DONE)

    async def one() -> None:
        data = probe_input(0, _UNUSED, queue)
        ran[data.invocation_id] = event = asyncio.Event()
        await client.start_workflow(
            InvokeModelWorkflow.run,
            data,
            id=f"bench-ceiling/{data.invocation_id}",
            task_queue=queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            request_eager_start=True,
        )
        await event.wait()

    async def batch(n: int) -> None:
        left = iter(range(n))

        async def lane() -> None:
            for _ in left:
                await one()

        await asyncio.gather(*(lane() for _ in range(CONCURRENCY)))
        await drained(client, f"TaskQueue = '{queue}' AND ExecutionStatus = 'Running'")

    rates: list[float] = []
    process = server = 0.0
    async with Worker(
        client,
        task_queue=queue,
        workflows=[InvokeModelWorkflow],
        workflow_runner=INVOKE_WORKFLOW_RUNNER,
        workflow_task_executor=InlineWorkflowTasks(),
        activities=[answered],
        max_concurrent_workflow_tasks=256,
    ):
        await batch(min(200, calls))  # warm-up
        for _ in range(rounds):
            p0, s0 = proc_cpu_seconds(os.getpid()), proc_cpu_seconds(server_pid)
            t0 = time.perf_counter()
            await batch(calls)
            elapsed = time.perf_counter() - t0
            process += proc_cpu_seconds(os.getpid()) - p0
            server += proc_cpu_seconds(server_pid) - s0
            rates.append(calls / elapsed)
    done = rounds * calls
    return Ceiling(rates, process / done * 1000, server / done * 1000)


async def _main(args: argparse.Namespace) -> None:
    client = await connect(Settings())
    gc_tuning.settle()
    found = await _measure(client, args.server_pid, args.rounds, args.calls)
    print(json.dumps(asdict(found)), flush=True)


if __name__ == "__main__":
    import uvloop

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server-pid", type=int, required=True)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--calls", type=int, default=640)
    uvloop.run(_main(parser.parse_args()))
    # The Temporal SDK can abort in PyGILState_Release at interpreter exit: leave cleanly now.
    os._exit(0)
