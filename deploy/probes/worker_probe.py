"""Exec probe for the worker container, which serves no HTTP.

The only outside evidence that a worker is doing its job is Temporal's own list of pollers on
the task queue: the SDK names each poller "<pid>@<hostname>", and a pod's hostname is its name.

    python worker_probe.py ready   # exit 0 when this host polls the workflow and activity queues
    python worker_probe.py live    # exit 1 only when Temporal answers and this host does not poll

`live` passes while Temporal itself is unreachable: restarting every worker does not cure a
Temporal outage, it only adds a reconnect storm. It fails when Temporal is fine and this
process has stopped polling (a worker that died inside a process that did not exit).

Settings come from the same MODEL_ROUTER_* environment as the worker, so namespace, TLS and
API key match what the worker uses.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
import time

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

from core.settings import Settings
from core.temporal import connect

QUEUE_TYPES = {
    "workflow": TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    "activity": TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
}


async def stale_queues(
    client: Client, settings: Settings, hostname: str, max_age: float
) -> list[str]:
    """The queue types this host has not polled within max_age seconds."""
    missing = []
    now = time.time()
    for label, queue_type in QUEUE_TYPES.items():
        response = await client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=settings.temporal_namespace,
                task_queue=TaskQueue(name=settings.temporal_task_queue),
                task_queue_type=queue_type,
            )
        )
        fresh = [
            poller
            for poller in response.pollers
            if poller.identity.endswith(f"@{hostname}")
            and now - poller.last_access_time.ToSeconds() <= max_age
        ]
        if not fresh:
            missing.append(label)
    return missing


async def probe(mode: str, settings: Settings, hostname: str, max_age: float) -> tuple[int, str]:
    try:
        client = await connect(settings)
        missing = await stale_queues(client, settings, hostname, max_age)
    except Exception as exc:  # any failure to ask Temporal means "cannot tell"
        reason = f"temporal unreachable at {settings.temporal_address}: {type(exc).__name__}"
        return (0 if mode == "live" else 1), reason
    queue = settings.temporal_task_queue
    if missing:
        return 1, f"no poller from {hostname} on {queue} ({', '.join(missing)}) in {max_age:.0f}s"
    return 0, f"{hostname} polls {queue}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("mode", choices=["ready", "live"])
    parser.add_argument(
        "--max-age",
        type=float,
        default=150.0,
        help="seconds since a poller's last poll for it to count (long polls last about 70 s)",
    )
    parser.add_argument(
        "--timeout", type=float, default=10.0, help="give up after this many seconds"
    )
    args = parser.parse_args(argv)

    settings = Settings()
    try:
        code, reason = asyncio.run(
            asyncio.wait_for(
                probe(args.mode, settings, socket.gethostname(), args.max_age), timeout=args.timeout
            )
        )
    except TimeoutError:
        code = 0 if args.mode == "live" else 1
        reason = f"no answer from temporal at {settings.temporal_address} in {args.timeout:.0f}s"
    print(f"{args.mode}: {'ok' if code == 0 else 'failed'}: {reason}")
    return code


if __name__ == "__main__":
    exit_code = main()
    sys.stdout.flush()
    # The Temporal SDK's native threads can abort interpreter teardown (PyGILState_Release),
    # which would turn a passing probe into a failing one; the verdict is already printed.
    os._exit(exit_code)
