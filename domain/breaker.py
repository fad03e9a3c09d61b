"""A per-deployment circuit breaker as a pure state machine with an injected clock.

Closed: calls pass; `threshold` consecutive transient failures open it. Open: calls are refused
(the next candidate serves) until `cooldown` has passed; then one trial call is let through
(half-open). The trial's success closes it, its failure opens it for another cool-down. So a
healed provider is back within one cool-down, not at the next scheduled probe.

Once open, a call that started before it opened says nothing of the provider now: its
outcome (`started_at`) moves no state. Before, a 90 s stream begun ahead of an outage that
completed after the breaker opened closed it and reported the deployment recovered, one
Approved → Degraded → Approved flap (two events and a catalog rebuild for every tenant) per
long stream in flight; and such a call failing late while the trial was out reopened the
breaker and reported sustained failure before the trial had answered."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half-open"


@dataclass
class Breaker:
    clock: Callable[[], float]
    threshold: int = 3
    cooldown: float = 2.0
    state: BreakerState = BreakerState.CLOSED
    failures: int = 0
    opened_at: float = 0.0
    # The trial in flight may itself hang; after another cool-down a new trial is allowed.
    trial_started: float | None = field(default=None)
    # Told of every change of state (e.g. to report sustained failure to the lifecycle).
    on_change: Callable[[BreakerState, BreakerState], None] | None = field(default=None)
    # The provider's own Retry-After on its last failure: only what callers are told to wait
    # (`wait`); calls are let through by the breaker's rules alone.
    not_before: float = 0.0
    # The last failure said the provider was busy (domain.failures.BUSY), not unwell.
    busy: bool = False

    def _move(self, to: BreakerState) -> None:
        before, self.state = self.state, to
        if before is not to and self.on_change is not None:
            self.on_change(before, to)

    def allow(self) -> bool:
        now = self.clock()
        if self.state is BreakerState.CLOSED:
            return True
        if self.state is BreakerState.OPEN:
            if now - self.opened_at < self.cooldown:
                return False
            self.state = BreakerState.HALF_OPEN
            self.trial_started = now
            return True
        if self.trial_started is not None and now - self.trial_started < self.cooldown:
            return False
        self.trial_started = now
        return True

    def refuses(self) -> bool:
        """Whether `allow` would refuse a call now, asked without taking a trial's place."""
        now = self.clock()
        if self.state is BreakerState.OPEN:
            return now - self.opened_at < self.cooldown
        if self.state is BreakerState.HALF_OPEN:
            return self.trial_started is not None and now - self.trial_started < self.cooldown
        return False

    def wait(self) -> float:
        """Seconds until this deployment may next be tried: the rest of an open cool-down (or
        of a trial in flight), or of the provider's Retry-After, whichever ends later."""
        now = self.clock()
        if self.state is BreakerState.OPEN:
            until = self.opened_at + self.cooldown
        elif self.state is BreakerState.HALF_OPEN and self.trial_started is not None:
            until = self.trial_started + self.cooldown
        else:
            until = now
        return max(0.0, until - now, self.not_before - now)

    def _stale(self, started_at: float | None) -> bool:
        """A call that started before the breaker opened (None: a trial, always heard)."""
        return (
            started_at is not None
            and self.state is not BreakerState.CLOSED
            and started_at < self.opened_at
        )

    def success(self, started_at: float | None = None) -> None:
        if self._stale(started_at):
            return
        self.failures, self.trial_started, self.not_before = 0, None, 0.0
        self._move(BreakerState.CLOSED)

    def failure(
        self, retry_after: float | None = None, busy: bool = False, started_at: float | None = None
    ) -> None:
        if self._stale(started_at):
            return
        now = self.clock()
        self.failures += 1
        self.busy = busy
        if retry_after is not None:
            self.not_before = now + retry_after
        if self.state is BreakerState.HALF_OPEN or self.failures >= self.threshold:
            self.opened_at, self.trial_started = now, None
            self._move(BreakerState.OPEN)
