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
breaker and reported sustained failure before the trial had answered.

Two rules say what one process's open breakers are worth beyond it: `network_suspected` (the
health probe's network rule on them: its own network, not the providers) and `outlived` (the
catalog judged the deployment since: the breaker is stale). A third, `relapsed`, says when the
process's own trials are not to be believed again."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from domain.catalog import CatalogDeployment
from domain.enums import DeploymentState
from domain.health import UNREACHABLE
from domain.health import network_suspected as _network_suspected


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
    # The last failure's kind (providers/errors.py) and its provider, for `network_suspected`;
    # None from a caller that does not say.
    kind: str | None = None
    provider: str | None = None

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
        self,
        retry_after: float | None = None,
        busy: bool = False,
        started_at: float | None = None,
        kind: str | None = None,
        provider: str | None = None,
    ) -> None:
        if self._stale(started_at):
            return
        now = self.clock()
        self.failures += 1
        self.busy, self.kind, self.provider = busy, kind, provider
        if retry_after is not None:
            self.not_before = now + retry_after
        if self.state is BreakerState.HALF_OPEN or self.failures >= self.threshold:
            self.opened_at, self.trial_started = now, None
            self._move(BreakerState.OPEN)


def network_suspected(open_breakers: Iterable[tuple[Breaker, bool]]) -> bool:
    """Whether a process's open (or half-open) breakers look like its own network (its DNS, its
    egress) rather than the providers': domain.health's network rule, on these breakers as the
    probe counts its run (`_network_counts`). Each comes with whether its deployment is judged
    already (reported Degraded by this process): left out of the share, as a Degraded
    deployment failing again is, its provider still among those unreachable. A breaker open on
    another failure (a 5xx, a cut stream, a rate limit) is a provider that answered.

    Only open breakers count: a closed one says how its last call went, maybe an hour ago, and
    a process whose egress broke a second before would still have closed breakers on every
    provider it had not called since, outvoting the open ones. The cost: a real outage of two
    providers at once (a third one serving) is held here too, until one of them closes; the
    breakers keep this process off them meanwhile, and the health probe judges them from the
    worker."""
    providers: set[str] = set()
    unreachable = fresh = 0
    for breaker, judged in open_breakers:
        lost = breaker.kind in UNREACHABLE
        if lost and breaker.provider is not None:
            providers.add(breaker.provider)
        if judged:
            continue
        fresh += 1
        unreachable += lost
    return _network_suspected(len(providers), unreachable, fresh)


def outlived(seen: CatalogDeployment | None, now: CatalogDeployment | None) -> bool:
    """Whether an open breaker's deployment has been judged by the catalog since, so that the
    breaker is stale (`seen`: the deployment in the process's previous snapshot, if any; `now`:
    in the new one). Degraded now: the health probe, or another process's trials, own it, and
    it gets no calls, so a fresh breaker loses nothing. Its row moved (every lifecycle
    transition bumps its version): Degraded and back while this process compiled no snapshot
    in between. Gone: never called again. Kept open, the breaker outlived the outage: once the
    deployment was Approved again this process refused its calls but one trial per cool-down,
    and one blip on that trial reported it Degraded for the whole fleet, where a fresh breaker
    needs `threshold` failures and a failed trial."""
    if now is None or now.state is DeploymentState.DEGRADED:
        return True
    return seen is not None and seen.version != now.version


def relapsed(recovered_at: float | None, now: float, window: float) -> bool:
    """Whether a deployment reported Degraded again `now` came back by this process's recovery
    trials (at `recovered_at`, None: not within memory) less than `window` ago. The trial is the
    health probe's one-token request, and a deployment that answers it but fails real traffic
    (a self-hosted server erroring on long prompts, a proxy cutting long streams) passed it,
    failed its callers again and was reported again: Degraded and back every 15-60 s, two
    events, two webhooks and a catalog rebuild for every tenant each time. Relapsed, it is
    left to the scheduled health probe, as when the trials give up."""
    return recovered_at is not None and now - recovered_at < window
