"""How fast and how busy the shared machine is: the yardstick the benchmarks report, and a
bounded wait for the load average to settle before a run."""

from __future__ import annotations

import os
import time
import timeit


def calibrate() -> float:
    """µs for sum(range(1000)), best of 5 (as `python -m timeit` reports it): a yardstick for
    how fast this machine was during the run, since a shared VM's speed drifts."""
    return min(timeit.repeat("sum(range(1000))", number=2000, repeat=5)) / 2000 * 1e6


def wait_for_quiet(max_wait: float, limit: float) -> tuple[float, float, float]:
    """Other engineers share this machine: wait (bounded) for the 1-minute load to settle."""
    deadline = time.monotonic() + max_wait
    load = os.getloadavg()
    while load[0] > limit and time.monotonic() < deadline:
        print(f"load average {load[0]:.2f} > {limit}: waiting…", flush=True)
        time.sleep(10)
        load = os.getloadavg()
    return load
