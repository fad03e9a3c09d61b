"""What this process's breakers tell the lifecycle, and bringing a deployment back after they
reported it Degraded.

The router skips Degraded deployments, so once the lifecycle has a breaker's report no caller
reaches that breaker again, and only the scheduled health probe (minutes away) would restore
the deployment. So the process that reported it trials it in the background: the health
probe's minimal request through the real adapter (`send_probe`), once per breaker cool-down.
The first success closes the breaker, whose registry then reports the recovery (Degraded →
Approved, with its event). After `window` seconds without one it stops, drops its breaker,
and leaves the deployment to the scheduled probe. A trial is not an invocation: it writes no
receipt, and no probe sample either (those are one per probe window, and feed the router's
latency term).

Reports go out one at a time per deployment, in the order the breaker made them, so a recovery
can never overtake the Degraded report it answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from typing import TypeVar

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client

from activities.lifecycle_client import LifecycleClient
from activities.probes import send_probe
from activities.resilience import BreakerRegistry
from domain.health import ProbeOutcome
from domain.lifecycle import Transition
from providers.secrets import SecretBroker
from store import probes

log = logging.getLogger("model_router.breakers")

Key = tuple[str, str]
T = TypeVar("T")


class BreakerRecovery:
    def __init__(
        self,
        client: Client,
        sessions: async_sessionmaker[AsyncSession],
        breakers: BreakerRegistry,
        broker: SecretBroker,
        *,
        cooldown: float,
        window: float,
        trial_timeout: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lifecycle = LifecycleClient(client)
        self._sessions = sessions
        self._breakers = breakers
        self._broker = broker
        self._cooldown, self._window, self._trial_timeout = cooldown, window, trial_timeout
        self._clock = clock
        self._reports: dict[Key, asyncio.Task[bool]] = {}  # the latest report per deployment
        self._trials: dict[Key, asyncio.Task[None]] = {}
        self._next: dict[Key, float] = {}  # when each deployment's next trial starts
        breakers.report = self.report
        breakers.trialling = self.trialling

    def rebind(self, client: Client) -> None:
        """Send verdicts on `client` from now on (core/temporal_rotation.py)."""
        self._lifecycle = LifecycleClient(client)

    def report(self, tenant_id: str, deployment_id: str, healthy: bool) -> None:
        """The registry's callback (synchronous, on the event loop)."""
        key = (tenant_id, deployment_id)
        loop = asyncio.get_running_loop()
        sent = loop.create_task(self._send(key, healthy, self._reports.get(key)))
        self._reports[key] = sent
        sent.add_done_callback(lambda task: self._drop(self._reports, key, task))
        trial = self._trials.get(key)
        if healthy:
            # Closed by a caller's own trial: nothing left to recover. (A trial of ours that
            # succeeded is the one reporting, and ends by itself.)
            if trial is not None and trial is not asyncio.current_task():
                trial.cancel()
        elif trial is None and self._window > 0:
            started = loop.create_task(self._recover(key, sent))
            self._trials[key] = started
            started.add_done_callback(lambda task: self._drop(self._trials, key, task))

    def trialling(self, tenant_id: str, deployment_id: str) -> bool:
        """Whether this process trials the deployment back now: the catalog's Degraded is this
        process's own report, and the breaker it keeps is the one its first good trial closes
        (BreakerRegistry.catalog_moved leaves it be)."""
        return (tenant_id, deployment_id) in self._trials

    def next_trial_in(self, tenant_id: str, deployment_ids: Iterable[str]) -> float | None:
        """Seconds until this process next trials one of these deployments; None if it trials
        none of them."""
        due = [self._next[k] for d in deployment_ids if (k := (tenant_id, d)) in self._next]
        return max(0.0, min(due) - self._clock()) if due else None

    async def aclose(self) -> None:
        tasks = [*self._trials.values(), *self._reports.values()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    @staticmethod
    def _drop(tasks: dict[Key, asyncio.Task[T]], key: Key, task: asyncio.Task[T]) -> None:
        if tasks.get(key) is task:
            del tasks[key]

    async def _send(self, key: Key, healthy: bool, after: asyncio.Task[bool] | None) -> bool:
        """Whether the lifecycle took the report."""
        if after is not None:
            await asyncio.wait([after])  # in order, whatever became of the earlier one
        transition = Transition.PROBE_RECOVERED if healthy else Transition.PROBE_FAILED
        try:
            await self._lifecycle.transition(*key, transition)
        except Exception as exc:  # a retired or not-yet-approved deployment: nothing to do
            log.info("breaker report not applied: %s", type(exc).__name__)
            return False
        return True

    async def _recover(self, key: Key, reported: asyncio.Task[bool]) -> None:
        try:
            # Known from the start: a caller refused while the report is still on its way
            # (the Degraded row can be visible before the update's reply gets back here) is
            # told this trial, not the cap.
            self._next[key] = self._clock() + self._cooldown
            await asyncio.wait([reported])
            give_up = self._clock() + self._window
            while (due := self._clock() + self._cooldown) <= give_up:
                self._next[key] = due
                await asyncio.sleep(self._cooldown)
                healthy = await self._trial(key)
                if healthy is None:
                    # Retired meanwhile (or otherwise not probed any more).
                    self._breakers.forget(*key)
                    return
                if healthy:
                    self._breakers.get(*key).success()  # closing it reports the recovery
                    return
            log.info("breaker recovery of %s left to the health probe", key[1])
            if not reported.cancelled() and reported.result():
                # Degraded: the probe decides when it is back, and this process's open breaker
                # must not outlast that (resilience.BreakerRegistry.forget). Had the report not
                # been taken (Temporal away), the deployment is still routed, and the open
                # breaker is all that keeps this process's calls off it.
                self._breakers.forget(*key)
        finally:
            self._next.pop(key, None)
            # Whatever ended this, a later sustained failure must be reported again.
            self._breakers.forget_report(*key)

    async def _trial(self, key: Key) -> bool | None:
        """Whether the deployment answered; None when it is no longer one to probe."""
        try:
            async with self._sessions() as session:
                found = await probes.probe_targets(session, [key[0]])
            target = next((t for t in found if t.deployment_id == key[1]), None)
            if target is None:
                return None
            result, _, _ = await send_probe(self._broker, target, self._trial_timeout)
        except Exception as exc:  # an unexpected failure is a failed trial, not the loop's end
            log.warning("breaker recovery trial failed: %s", type(exc).__name__)
            return False
        return result.outcome is ProbeOutcome.OK
