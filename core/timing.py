"""Where one gateway request's time goes: waiting on the provider, or the gateway's own work.

The request's middleware opens a `Timing`; the invoke path marks every wait on the provider
(each read of the next stream event, each embed or rerank call) with `waiting()`. The provider
call runs in a task begun inside the request, which inherits this context variable, so its waits
land on the request's own `Timing`. At the response's first byte the split is
total = gateway + provider, reported in `Server-Timing` and the `overhead` histogram.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar


class Timing:
    __slots__ = ("_after", "_since", "invoked", "provider", "started")

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.provider = 0.0  # seconds spent waiting on the provider, waits that ended
        self._since: float | None = None  # the wait in progress, if any
        self.invoked = False  # the request reached a provider (an invocation, not a read)
        self._after: list[Callable[[], object]] = []

    def enter(self) -> None:
        self.invoked = True
        self._since = time.perf_counter()

    def leave(self) -> None:
        if self._since is not None:
            self.provider += time.perf_counter() - self._since
            self._since = None

    def after_response(self, then: Callable[[], object]) -> None:
        self._after.append(then)

    def responded(self) -> None:
        """The response is over (its last byte sent, or the caller gone): run what waited."""
        after, self._after = self._after, []
        for then in after:
            then()

    def split(self) -> tuple[float, float, float]:
        """(total, gateway, provider) in milliseconds, rounded to 0.01 so that the parts add up
        exactly: gateway is total minus provider."""
        now = time.perf_counter()
        provider = self.provider + (now - self._since if self._since is not None else 0.0)
        total = round((now - self.started) * 1000, 2)
        waited = min(round(provider * 1000, 2), total)
        return total, round(total - waited, 2), waited


_current: ContextVar[Timing | None] = ContextVar("model_router_timing", default=None)


def begin() -> Timing:
    timing = Timing()
    _current.set(timing)
    return timing


def after_response(then: Callable[[], object]) -> None:
    """Run `then` once this request's response is over; at once outside a gateway request."""
    timing = _current.get()
    if timing is None:
        then()
    else:
        timing.after_response(then)


def current() -> Timing | None:
    """The request's Timing, for a loop that marks its waits itself (one lookup per stream)."""
    return _current.get()


@contextmanager
def waiting() -> Iterator[None]:
    """Mark a wait on the provider (a no-op outside a gateway request)."""
    timing = _current.get()
    if timing is None:
        yield
        return
    timing.enter()
    try:
        yield
    finally:
        timing.leave()
