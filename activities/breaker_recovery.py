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

A deployment this process's trials brought back that it reports Degraded again within the
window (domain.breaker `relapsed`) is not trialled again this time: it answers the probe's
request but not its callers', and trialled back it went Degraded and Approved every 15-60 s.
The health probe judges it, as when the trials give up.

Reports go out one at a time per deployment, in the order the breaker made them, so a recovery
can never overtake the Degraded report it answers. Each waits for the lifecycle at most
`REPORT_TIMEOUT_S`, and a Recovered report that did not go through is sent again a few times
(`RECOVERED_RETRIES_S`): the breaker is closed and the trials have ended, so nothing else
would restore the deployment before the scheduled probe.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client

from activities.lifecycle_client import LifecycleClient, LifecycleClosed, LifecycleRefused
from activities.probes import send_probe
from activities.resilience import BreakerRegistry
from domain.breaker import relapsed
from domain.health import ProbeOutcome
from domain.lifecycle import Transition
from providers.secrets import SecretBroker
from store import probes

log = logging.getLogger("model_router.breakers")

Key = tuple[str, str]
T = TypeVar("T")

# How long a report waits for the lifecycle worker. Up, it answers in well under a second (one
# workflow task, one store write); down, an unbounded report waited indefinitely, and with it
# the trials, which start once the Degraded report is answered, and every later report of the
# deployment, queued behind it. Two default cool-downs: a report past it counts as not taken
# (it may yet land, as the probe's verdict could; a Degraded one not taken leaves this
# process's breaker open, keeping its calls off).
REPORT_TIMEOUT_S = 10.0
# The waits before each new attempt of a Recovered report that was not taken for want of an
# answer (not a refusal): a lifecycle worker restarting or Temporal failing over. With the
# bound above, about 70 s in all, within the health probe's default period (two minutes) that
# would restore the deployment otherwise.
RECOVERED_RETRIES_S: tuple[float, ...] = (1.0, 5.0, 25.0)


def _cancelled() -> bool:
    """Whether the running task was asked to stop (`asyncio.wait_for`'s own cancellation at
    its bound is of another task, or taken back once the bound has fired)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


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
        report_timeout: float = REPORT_TIMEOUT_S,
        recovered_retries: Sequence[float] = RECOVERED_RETRIES_S,
    ) -> None:
        self._report_timeout, self._retries = report_timeout, tuple(recovered_retries)
        self._lifecycle = LifecycleClient(client, timeout=report_timeout)
        self._sessions = sessions
        self._breakers = breakers
        self._broker = broker
        self._cooldown, self._window, self._trial_timeout = cooldown, window, trial_timeout
        self._clock = clock
        self._reports: dict[Key, asyncio.Task[bool]] = {}  # the latest report per deployment
        self._trials: dict[Key, asyncio.Task[None]] = {}
        self._next: dict[Key, float] = {}  # when each deployment's next trial starts
        # When this process's trials last brought each deployment back, within the window.
        self._recovered: dict[Key, float] = {}
        breakers.report = self.report
        breakers.trialling = self.trialling

    def rebind(self, client: Client) -> None:
        """Send verdicts on `client` from now on (core/temporal_rotation.py)."""
        self._lifecycle = LifecycleClient(client, timeout=self._report_timeout)

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
            started = loop.create_task(self._recover(key, sent, self._relapsed(key)))
            self._trials[key] = started
            started.add_done_callback(lambda task: self._drop(self._trials, key, task))

    def trialling(self, tenant_id: str, deployment_id: str) -> bool:
        """Whether this process trials the deployment back now: the catalog's Degraded is this
        process's own report, and the breaker it keeps is the one its first good trial closes
        (BreakerRegistry.catalog_moved leaves it be). A relapsed one counts until its report
        is answered, and is the probe's from then."""
        return (tenant_id, deployment_id) in self._trials

    def reporting(self, tenant_id: str, deployment_id: str) -> bool:
        """Whether a report of the deployment is still on its way, or to be sent again."""
        return (tenant_id, deployment_id) in self._reports

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

    def _relapsed(self, key: Key) -> bool:
        """Whether the deployment, reported Degraded now, came back by this process's trials
        within the window. Recoveries older than that are forgotten here and as one is kept
        (`_remember`), so what is kept is bounded by the deployments trialled back in one
        window; both on a breaker's report, never per call."""
        now = self._clock()
        for old in [k for k, at in self._recovered.items() if not relapsed(at, now, self._window)]:
            del self._recovered[old]
        return key in self._recovered

    def _remember(self, key: Key) -> None:
        self._relapsed(key)
        self._recovered[key] = self._clock()

    async def _send(self, key: Key, healthy: bool, after: asyncio.Task[bool] | None) -> bool:
        """Whether the lifecycle took the report."""
        if after is not None:
            await asyncio.wait([after])  # in order, whatever became of the earlier one
        transition = Transition.PROBE_RECOVERED if healthy else Transition.PROBE_FAILED
        # Only a Recovered report is sent again: a lost Degraded one leaves the deployment
        # routed, this process's breaker keeping its own calls off it, and the next failed
        # trial reports again.
        retries = iter(self._retries if healthy else ())
        # One update id for the report and its resends: one not answered in time was usually
        # taken and applies late, and a resend as a new update could then undo a Degraded the
        # health probe recorded in between; Temporal applies an update id once.
        update_id = f"breaker-{uuid.uuid4().hex}"
        while True:
            try:
                await self._lifecycle.transition(*key, transition, update_id=update_id)
                return True
            except (LifecycleRefused, LifecycleClosed) as exc:
                # The lifecycle's answer: retired, not yet approved, or no longer Degraded (the
                # probe recovered it first). Nothing to do, and nothing to send again.
                log.info("breaker report not applied: %s", type(exc).__name__)
                return False
            except Exception as exc:  # no answer: the worker down or past the bound
                if _cancelled():
                    # Shut down (`aclose`): the SDK ends an update's wait, cancelled, with its
                    # own error, no lost answer to send the report again for. (Python 3.11's
                    # `wait_for`, the bound, raises the cancellation itself; 3.12's passes the
                    # SDK's error on.)
                    raise asyncio.CancelledError from exc
                delay = next(retries, None)
                if delay is None:
                    log.log(
                        logging.WARNING if healthy else logging.INFO,
                        "breaker report of %s not taken: %s",
                        key[1],
                        type(exc).__name__,
                    )
                    return False
                log.info("breaker report of %s sent again in %ss", key[1], delay)
            await asyncio.sleep(delay)
            if self._reports.get(key) is not asyncio.current_task():
                # The breaker failed again meanwhile: its report, queued behind this one,
                # says what holds now.
                return False

    async def _recover(self, key: Key, reported: asyncio.Task[bool], relapse: bool) -> None:
        try:
            if relapse:
                await asyncio.wait([reported])
                log.info(
                    "deployment %s failed again within %.0fs of this process's trials bringing "
                    "it back: left to the health probe",
                    key[1],
                    self._window,
                )
            elif await self._trial_back(key, reported):
                return
            else:
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

    async def _trial_back(self, key: Key, reported: asyncio.Task[bool]) -> bool:
        """One trial per cool-down until one succeeds (it closes the breaker, which reports the
        recovery) or the deployment is no longer probed: True; the window over: False."""
        # Known from the start: a caller refused while the report is still on its way (the
        # Degraded row can be visible before the update's reply gets back here) is told this
        # trial, not the cap.
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
                return True
            if healthy:
                self._remember(key)
                self._breakers.get(*key).success()  # closing it reports the recovery
                return True
        return False

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
