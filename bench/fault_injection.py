"""The fault benchmark's faults: which, when, and how each is done to the stack — PostgreSQL and
the Temporal dev server stopped and started again, or frozen (SIGSTOP), the API and the worker
killed (SIGKILL) and started again — each in a thread of its own beside the load."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.invoke_stack import Stack

# How long PostgreSQL and Temporal stay down: the fault tests' outage, an ordinary blip.
OUTAGE_SECONDS = 5.0
# How long they stay frozen: twice the gateway's bounds on waiting for either
# (`INVOKE_STORE_WAIT_SECONDS`, `INVOKE_START_WAIT_SECONDS`, 5 s each), so that the bounds, not
# the end of the freeze, are what end the waits. (A 5 s freeze in a quick run was absorbed:
# the calls under way finished as it ended, and one was refused, at 5,006 ms.)
FREEZE_SECONDS = 10.0


@dataclass
class Fault:
    name: str
    at: float  # seconds into the load when it is done
    began: float = 0.0  # seconds into the load: when the part went away
    back: float = 0.0  # …and when it was back (ready again)


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


def actions_on(
    stack: Stack, env: dict[str, str], temporal_db: Path
) -> dict[str, Callable[[], None]]:
    """Each fault, done to `stack` (its services started with `env`, Temporal's store in
    `temporal_db`): blocking, for a thread of its own."""
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
