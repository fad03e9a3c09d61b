"""Polling with a deadline, the only way tests wait for something to happen; and how far a
test may bound the time something took.

Elapsed time is asserted as a lower bound (a call cannot beat its own bound on any machine), or
as an upper bound at the own bound of the next slower mechanism that would also have ended the
wait: that one cannot end it any sooner, so the assertion tells the two apart on any machine. A
loaded machine adds tenths of a second to a call, sometimes seconds, so an upper bound a few
tenths past the bound under test measures the machine rather than the code; where a reason, a
count or a state shows which bound ended a call, the test asserts that instead.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

# Seconds past which a wait that the code under test bounds far more tightly (at most a few
# seconds) counts as unbounded: an SDK's own default (600 s) or a hang (ended at 300 s by
# pytest-timeout, pyproject.toml) is the slower mechanism such a test rules out.
UNBOUNDED = 30.0


async def eventually(
    probe: Callable[[], Any],
    *,
    timeout: float = 20.0,
    interval: float = 0.05,
) -> Any:
    """Call probe() (sync or async) until it returns something truthy, or fail after timeout."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        result = probe()
        last = await result if inspect.isawaitable(result) else result
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s (last value: {last!r})")


def wait_until(
    probe: Callable[[], T | None], *, timeout: float = 20.0, interval: float = 0.05
) -> T:
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s (last value: {last!r})")
