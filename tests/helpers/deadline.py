"""Polling with a deadline, the only way tests wait for something to happen."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


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
