"""The invoke path's resilience settings and state: attempt timeouts (with per-profile and
per-deployment overrides), retry rules, and the circuit breakers.

Breakers live in process memory, one registry per process (API process or worker): each
process learns a deployment's failures from its own calls. That keeps the hot path free of
I/O; a fleet of N processes sends at most N trial calls to a provider that is down. What one
process's breakers tell the fleet (a Degraded report) is checked against its own network first,
and what the fleet's catalog says of a deployment makes this process's open breaker for it
stale (domain/breaker.py): both on state changes and catalog versions, never per call."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field

from activities.delta_text import DeltaText
from activities.stream_watchdog import StreamWatchdog
from core import timing
from core.settings import Settings
from domain.breaker import Breaker, BreakerState, network_suspected, outlived
from domain.fallback import may_answer
from domain.invocation import AttemptTimeouts, InvocationInput, Target
from domain.retry import RetryRules
from domain.snapshot import CatalogSnapshot
from providers.base import ProviderAdapter
from providers.errors import ErrorKind, ProviderError
from providers.types import (
    AnswerEvent,
    CallLimits,
    ChatRequest,
    KeepAlive,
    TextDelta,
    ToolCallDelta,
)

log = logging.getLogger("model_router.breakers")

Key = tuple[str, str]


def _never(_tenant_id: str, _deployment_id: str) -> bool:
    return False


class BreakerRegistry:
    """One breaker per (tenant, deployment) in this process. Sustained failure — a breaker that
    opens again because its trial failed, other than as busy — is reported once to
    `report(tenant, deployment, healthy=False)`, and its closing after that with
    `healthy=True`; the lifecycle turns those into Degraded and back. The router sends no
    trials to a Degraded deployment, so the reporter trials it itself
    (`activities/breaker_recovery.py`).

    A report is held while this process's open breakers look like its own network failing
    (domain.breaker `network_suspected`); the breaker still keeps this process's calls off the
    deployment, and the next failed trial asks again. And an open breaker whose deployment the
    catalog judged since is forgotten (`catalog_moved`)."""

    def __init__(
        self, threshold: int, cooldown: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._threshold, self._cooldown, self._clock = threshold, cooldown, clock
        self._breakers: dict[Key, Breaker] = {}
        self._reported: set[Key] = set()
        # The breakers open or half-open now: the network rule's evidence, and those the
        # catalog may make stale. Kept on state changes only (a call that succeeds on a closed
        # breaker changes none), so neither asks every breaker the process ever made.
        self._open: set[Key] = set()
        # Sustained failure not reported for the network rule, each logged once.
        self._held: set[Key] = set()
        self.report: Callable[[str, str, bool], None] | None = None
        # Whether this process trials the deployment back now (BreakerRecovery): its breaker
        # is the trials', closed by the first that succeeds, and the catalog leaves it be.
        self.trialling: Callable[[str, str], bool] = _never

    def _on_change(
        self, key: Key, breaker: Breaker, before: BreakerState, to: BreakerState
    ) -> None:
        # A breaker forgotten (`forget`) while a call still held it reports nothing.
        if self._breakers.get(key) is not breaker:
            return
        if to is BreakerState.CLOSED:
            self._open.discard(key)
            self._held.discard(key)
        else:
            self._open.add(key)
        if self.report is None:
            return
        if (
            before is BreakerState.HALF_OPEN
            and to is BreakerState.OPEN
            and key not in self._reported
            and not breaker.busy  # busy, not unwell: domain.failures.BUSY
        ):
            if self._own_network():
                self._hold(key)
                return
            self._held.discard(key)
            self._reported.add(key)
            self.report(key[0], key[1], False)
        elif to is BreakerState.CLOSED and key in self._reported:
            self._reported.discard(key)
            self.report(key[0], key[1], True)

    def _own_network(self) -> bool:
        """The network rule on this process's open breakers: asked at a failed trial only (at
        most one per open breaker and cool-down), over the open ones only."""
        return network_suspected((self._breakers[k], k in self._reported) for k in self._open)

    def _hold(self, key: Key) -> None:
        """Not reported: Degraded holds for every process, and this one's evidence is what the
        probe's rule takes for its own network. Reported, a pod whose egress broke would degrade
        every deployment it called, the probe approve them again minutes later, and the pod
        report them again at its next failed trials: a fleet-wide outage, over and over.
        Logged once, until the breaker closes or is forgotten."""
        if key in self._held:
            return
        self._held.add(key)
        log.warning(
            "deployment %s failing here, not reported Degraded: %d breakers open here, failing "
            "unreachable on several providers; this process's own network suspected",
            key[1],
            len(self._open),
        )

    def catalog_moved(
        self, tenant_id: str, before: CatalogSnapshot | None, now: CatalogSnapshot
    ) -> None:
        """The tenant's catalog compiled here at a new version (routing/snapshots.py
        `on_version`, once per version; `before` the snapshot it replaces, if one was kept):
        each of the tenant's breakers open here whose deployment the catalog judged since
        (domain.breaker `outlived`) is forgotten, unless this process trials it back. Kept,
        a process that had not reported the deployment kept its breaker open through the
        outage (it routed nothing there) and refused the deployment's calls once it was back.
        Costs one pass over the breakers open now, usually none."""
        for key in [k for k in self._open if k[0] == tenant_id]:
            if self.trialling(*key):
                continue
            seen = before.deployment(*key) if before is not None else None
            if outlived(seen, now.deployment(*key)):
                self.forget(*key)

    def forget_report(self, tenant_id: str, deployment_id: str) -> None:
        """The reporter stopped following this deployment (it left it to the health probe): a
        later sustained failure is news again."""
        self._reported.discard((tenant_id, deployment_id))

    def forget(self, tenant_id: str, deployment_id: str) -> None:
        """This process's breaker for the deployment is dropped with its report: the health
        probe (or another process's trials) owns the deployment now. Kept open, the breaker
        outlived the outage: once the probe approved the deployment again, each process
        refused every call but one trial per cool-down (a profile's only deployment answered
        503), and that one trial's single blip reported the deployment Degraded again for the
        whole fleet. A Degraded deployment gets no calls, so a fresh breaker loses nothing."""
        key = (tenant_id, deployment_id)
        self._breakers.pop(key, None)
        self._reported.discard(key)
        self._open.discard(key)
        self._held.discard(key)

    def wait(self, tenant_id: str, deployment_ids: Iterable[str]) -> float | None:
        """Seconds until the first of these deployments may be tried again in this process
        (0 for one without a breaker yet); None for no deployments."""
        waits = [
            found.wait() if (found := self._breakers.get((tenant_id, d))) is not None else 0.0
            for d in deployment_ids
        ]
        return min(waits, default=None)

    def none_callable(self, data: InvocationInput) -> bool:
        """Whether the call would call no one now: each target its route would come to
        (domain.fallback `may_answer` after a refused one, as `InvokeActivities._route` walks
        them) refused by its breaker. Asked without taking a trial's place; a deployment never
        called has no breaker, and is not refused."""
        refused: Target | None = None
        for target in data.targets:
            if refused is not None and not may_answer(data, refused, target, "circuit_open"):
                continue
            found = self._breakers.get((data.tenant_id, target.deployment_id))
            if found is None or not found.refuses():
                return False
            refused = target
        return True

    def get(self, tenant_id: str, deployment_id: str) -> Breaker:
        # Deployment ids are tenant-scoped: two tenants' "primary" are different providers.
        key = (tenant_id, deployment_id)
        found = self._breakers.get(key)
        if found is None:
            found = self._breakers[key] = Breaker(
                self._clock, threshold=self._threshold, cooldown=self._cooldown
            )
            made = found
            found.on_change = lambda before, to: self._on_change(key, made, before, to)
        return found


@dataclass
class Resilience:
    timeouts: AttemptTimeouts = field(default_factory=AttemptTimeouts)
    overrides: dict[str, dict[str, float]] = field(default_factory=dict)
    retry: RetryRules = field(default_factory=RetryRules)
    breakers: BreakerRegistry = field(default_factory=lambda: BreakerRegistry(3, 5.0))

    @classmethod
    def from_settings(cls, settings: Settings) -> Resilience:
        return cls(
            timeouts=AttemptTimeouts(
                connect=settings.provider_connect_timeout_seconds,
                first_byte=settings.invoke_first_byte_timeout_seconds,
                first_token=settings.invoke_first_token_timeout_seconds,
                idle=settings.invoke_stream_idle_timeout_seconds,
                attempt=settings.invoke_attempt_timeout_seconds,
            ),
            overrides=dict(settings.invoke_timeout_overrides),
            retry=RetryRules(
                max_attempts=settings.invoke_retry_max_attempts,
                base_delay=settings.invoke_retry_base_delay_seconds,
                max_delay=settings.invoke_retry_max_delay_seconds,
                max_retry_after=settings.invoke_retry_after_max_seconds,
            ),
            breakers=BreakerRegistry(
                settings.invoke_breaker_threshold, settings.invoke_breaker_cooldown_seconds
            ),
        )

    def timeouts_for(self, profile_id: str, deployment_id: str) -> AttemptTimeouts:
        values = self.timeouts.model_dump()
        for key in (f"profile:{profile_id}", f"deployment:{deployment_id}"):
            values.update(self.overrides.get(key, {}))
        return AttemptTimeouts.model_validate(values)


async def timed_stream(
    adapter: ProviderAdapter, request: ChatRequest, timeouts: AttemptTimeouts, budget: float
) -> AsyncIterator[AnswerEvent | KeepAlive]:
    """The adapter's stream, bounded: the first token, every later silence, and the attempt as
    a whole. A provider that accepts and never answers fails as a timeout, never holds on.

    A keep-alive (providers/types.KeepAlive) is a stream event like any other for the idle
    bound: a provider that says it is still there between two pieces of a long tool call is
    not silent. It does not hold off the first token's bound, which waits for output, and
    the attempt's bound caps a stream that only ever keeps alive. Once output has started it
    is passed on, for the caller's stream to keep alive too (api/wire.relay); before, there is
    no stream to the caller yet, and it goes no further."""
    loop = asyncio.get_running_loop()
    end = loop.time() + min(budget, timeouts.attempt)
    started = False
    stream = adapter.stream(request, limits=call_limits(timeouts))
    watchdog = StreamWatchdog()
    text = DeltaText()
    clock = timing.current()
    quiet_since = 0.0  # since when the bound in force counts
    restart = True  # the last event restarts it
    heard = False  # the adapter has yielded an event: the provider answered
    try:
        while True:
            phase = "stream idle" if started else "first token"
            now = loop.time()
            if restart:
                quiet_since = now
            bound = timeouts.idle if started else timeouts.first_token
            limit = min(quiet_since + bound, end) - now
            if limit <= 0:
                # Keep-alives took the first token's bound up to its end, or the attempt's ran out.
                raise _timeout(adapter, phase if quiet_since + bound <= end else "attempt budget")
            # One watchdog for the stream, not a timeout scope per chunk (stream_watchdog.py).
            watchdog.waiting(limit)
            if clock is not None:
                clock.enter()
            try:
                event = await anext(stream)
            except StopAsyncIteration:
                if (held := text.pending(None)) is not None:
                    yield held
                return
            except asyncio.CancelledError:
                if watchdog.expired():
                    raise _timeout(adapter, phase) from None
                raise
            except ProviderError:
                raise
            except Exception as exc:
                if not heard:
                    # Nothing came from the provider yet (an adapter's first event is its
                    # Accepted, once the headers are in): our own request failed to build or
                    # send (a value its JSON encoding refuses, a bug of ours). Not the provider's
                    # failure, so no retry, fallback or breaker strike: it escapes the attempts,
                    # and the call closes as our own (`internal`, activities/invoke.py).
                    raise
                # Garbage from a provider (or its SDK) is a failed attempt, never a crash.
                raise ProviderError(
                    ErrorKind.STREAM_INCOMPLETE,
                    provider=adapter.provider,
                    reason=f"malformed stream ({type(exc).__name__})",
                ) from None
            finally:
                watchdog.idle()
                if clock is not None:
                    clock.leave()
            heard = True
            if isinstance(event, KeepAlive):
                restart = started
                if started:
                    yield event
                continue
            restart = True
            if (held := text.pending(event)) is not None:
                yield held
            if isinstance(event, TextDelta | ToolCallDelta):
                started = True
                fixed = text.fix(event)
                if fixed is None:
                    continue  # all it held was half a pair, now waiting for the other half
                event = fixed
            yield event
    finally:
        watchdog.close()
        try:
            await stream.aclose()
        except Exception:  # noqa: S110 - the attempt's outcome is already decided
            pass


def call_limits(timeouts: AttemptTimeouts) -> CallLimits:
    """The attempt's bounds the adapter enforces itself (it sees the connection and headers)."""
    return CallLimits(connect=timeouts.connect, first_byte=timeouts.first_byte)


def _timeout(adapter: ProviderAdapter, phase: str) -> ProviderError:
    return ProviderError(ErrorKind.TIMEOUT, provider=adapter.provider, reason=f"{phase} timeout")
