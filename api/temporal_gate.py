"""Whether this API process can start invocations on Temporal, as one answer shared by the
invoke path and `/readyz`.

A start waits at most `invoke_start_wait_seconds` (a restart of a few seconds is absorbed: the
SDK retries while the server comes back). A start that fails or runs out of that wait marks
Temporal unreachable: from then on calls are refused at once with a 503 and `Retry-After`,
nothing claimed and nothing kept in memory, while one background probe asks the server's health
service until it answers; then starts go ahead again. So a caller never waits out the bound
during a long outage, and readiness says what the refusals say. A start the server answers
with a refusal (its namespace's rate limit, a namespace or a permission missing) is no outage:
it is answered as that refusal (`temporal-refused`, its status named) and the gate stays open.

Temporal counts as answering now when the server accepted a start within the last
`invoke_start_overlap_seconds`, or, for a call arriving after a quieter spell, when its health
service answers before that call's own start is in while no start has been waiting longer than
that window. A call's provider call then begins alongside its own start instead of after it.
That check is asked as the call arrives (`ask_ahead`), so that its round trip runs beside the
call's routing and claim rather than after them: after idling, a check took 1.21 ms on the
benchmark's machine (bench/start_after_idle.py, 2026-12-04), and the claim 0.65 ms paced.
Only a call inside that window after an outage began can reach its provider before its start
fails (it is then cancelled and its claim undone); any later one is refused with nothing
called. The health check is for an idle process: one with no start accepted in the window
otherwise began every call after its start's reply, 2.4 ms later at p50 on the benchmark's
machine (10.86 against 8.41 ms a call, paced, 2026-12-04), and later by a remote server's round
trip and write against Temporal Cloud. A server that is down refuses the check or leaves it
unanswered, so a call after an outage began still waits for its start; a server whose frontend
answers while its store does not is caught by a start waiting longer than the window.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from api.problems import Problem
from core import metrics

log = logging.getLogger("model_router.api")
T = TypeVar("T")

# gRPC statuses that mean the server (or the way to it) is not there, as opposed to a refusal
# of this particular request.
_DOWN = frozenset({RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED})
# A refusal of a start that lifts by itself: the namespace's rate limit. The SDK retries it for
# some 10 s itself (sdk-core's retryable codes), past the default 5 s start wait, so it mostly
# arrives here as a start timed out (docs/runbook.md says how to tell). Any other refusal is
# logged as an error: these are the gateway's Temporal configuration (a namespace that does not
# exist, credentials or permissions missing), which only an operator can put right; the rest
# are faults an operator should see too.
_THROTTLED = frozenset({RPCStatusCode.RESOURCE_EXHAUSTED})
_MISCONFIGURED = frozenset(
    {RPCStatusCode.NOT_FOUND, RPCStatusCode.PERMISSION_DENIED, RPCStatusCode.UNAUTHENTICATED}
)
# How often a known-unreachable server is asked whether it is back.
PROBE_INTERVAL_SECONDS = 0.5
# How soon a start refused by a server that is not there is tried again, within the bound.
RESTART_POLL_SECONDS = 0.2


class TemporalUnreachable(Problem):
    def __init__(self, retry_after: int) -> None:
        super().__init__(
            503,
            "Temporal is not reachable, so the invocation was not started; nothing was claimed "
            "and the Idempotency-Key stays unused. Retry after the indicated delay.",
            type_="https://model-router.dev/problems/temporal-unavailable",
            headers={"Retry-After": str(retry_after)},
            reason="temporal-unreachable",
        )


class TemporalRefused(Problem):
    """Temporal answered and refused the start: the server is there (`/readyz` says so, and the
    gate stays open), so the words and the reason are not those of an outage: an operator
    paging on `temporal-unreachable` is not sent after a cluster that answers. Its status name
    says which refusal; nothing of the call is in it. A 503 whatever the status, with
    Retry-After: nothing was claimed, the key stays unused, and the caller's fault it is not (a
    rate limit lifts by itself; a configuration an operator fixes lets the retry through)."""

    def __init__(self, status: RPCStatusCode, retry_after: int) -> None:
        why = ""
        if status in _THROTTLED:
            why = " for the namespace's rate limit"
        elif status in _MISCONFIGURED:
            why = " for the gateway's Temporal configuration, which an operator must correct"
        super().__init__(
            503,
            f"Temporal refused to start the invocation ({status.name}){why}; nothing was "
            "claimed and the Idempotency-Key stays unused. Retry after the indicated delay.",
            type_="https://model-router.dev/problems/temporal-refused",
            headers={"Retry-After": str(retry_after)},
            reason="temporal-refused",
            temporalStatus=status.name,
        )


class WorkerRestarting(Problem):
    """A refusal for this process's own reason: one of its in-process Temporal workers stopped
    and is being built again (api/invocation_workers.py). Temporal itself may be fine, so the
    words and the reason say so: an operator paging on `temporal-unreachable` is not sent to a
    healthy cluster."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(
            503,
            "This gateway process's invocation worker stopped and is being started again, so "
            "the invocation was not started; nothing was claimed and the Idempotency-Key stays "
            "unused. Retry after the indicated delay (another replica may take it now).",
            type_="https://model-router.dev/problems/worker-restarting",
            headers={"Retry-After": str(retry_after)},
            reason="worker-restarting",
        )


@dataclass(frozen=True)
class Asked:
    """A health check asked for a call as it arrived: its answer, and when it was sent."""

    answer: asyncio.Future[bool]
    sent_at: float


class TemporalGate:
    def __init__(
        self, client: Client, start_wait_seconds: float, overlap_seconds: float = 0.0
    ) -> None:
        self._client = client
        self._wait = start_wait_seconds
        self._overlap = overlap_seconds
        self._accepted_at = -math.inf  # when the server last accepted a start
        self._down_since: float | None = None
        self._held: str | None = None  # hold(): why this process refuses calls
        self._probe: asyncio.Task[None] | None = None
        # Starts under way, each with when it was sent; the first is the oldest.
        self._waiting: dict[object, float] = {}
        self._check: asyncio.Task[bool] | None = None  # one health check, shared while in flight
        self._check_sent = -math.inf

    def rebind(self, client: Client) -> None:
        """Check the server's health on `client` from now on (core/temporal_rotation.py)."""
        self._client = client

    @property
    def reachable(self) -> bool:
        return self._down_since is None and self._held is None

    @property
    def down(self) -> bool:
        """Whether Temporal is known unreachable (a start failed; the probe has not seen it
        back)."""
        return self._down_since is not None

    @property
    def held(self) -> str | None:
        """Why this process refuses calls of its own accord (`hold`), or None."""
        return self._held

    def hold(self, why: str) -> None:
        """Refuse invocations for a reason of this process's own (its in-process workers
        stopped: api/invocation_workers.py) until `release`, whatever Temporal answers."""
        if self._held is None:
            log.warning("refusing invocations: %s", why)
        self._held = why

    def release(self) -> None:
        if self._held is not None:
            log.info("invocations accepted again")
        self._held = None

    @property
    def retry_after(self) -> int:
        return max(1, math.ceil(self._wait))

    def refuse(self) -> Problem:
        if self._held is not None and self._down_since is None:
            metrics.refusals.add(1, {"reason": "worker-restarting"})
            return WorkerRestarting(self.retry_after)
        metrics.refusals.add(1, {"reason": "temporal-unreachable"})
        return TemporalUnreachable(self.retry_after)

    def check(self) -> None:
        """Refuse at once while Temporal is known unreachable."""
        if not self.reachable:
            raise self.refuse()

    def answered_recently(self) -> bool:
        """Whether a start was accepted within the overlap window (and none has failed since).
        Under load starts are accepted every few milliseconds, however long each one waits."""
        return self._down_since is None and time.monotonic() - self._accepted_at < self._overlap

    def ask_ahead(self) -> Asked | None:
        """For a call just arrived outside the window: the health check its start will be
        raced with, asked now (or the one in flight, shared), so that its answer can be in by
        the time the start is sent. None when it would not be asked then either: the window is
        open, there is no window, Temporal is known unreachable, or a start has waited longer
        than the window."""
        now = time.monotonic()
        if self.answered_recently() or not self._may_check(now):
            return None
        return Asked(self._shared_check(now), self._check_sent)

    async def answers_before(self, start: asyncio.Future[Any], asked: Asked | None = None) -> bool:
        """For a call outside the window, its start `start` under way: whether Temporal's
        health service answers before that start is in, so that the call can begin now. The
        check is the one `asked` as the call arrived, if it was sent within the window; else
        one asked now. False when the start came first (the call begins after it, or is
        refused), when the check was refused or unanswered, while another start has waited
        longer than the window (the frontend may answer while its store does not), and with no
        window (0)."""
        now = time.monotonic()
        if not self._may_check(now):
            return False
        if asked is not None and now - asked.sent_at < self._overlap:
            check = asked.answer
        else:
            check = self._shared_check(now)
        if not check.done():
            await asyncio.wait((check, start), return_when=asyncio.FIRST_COMPLETED)
        return not start.done() and check.done() and not check.cancelled() and check.result()

    def _may_check(self, now: float) -> bool:
        oldest = next(iter(self._waiting.values()), now)
        return self._down_since is None and self._overlap > 0 and now - oldest < self._overlap

    def _shared_check(self, now: float) -> asyncio.Future[bool]:
        """The health check in flight, or a new one."""
        if self._check is None or self._check.done():
            self._check, self._check_sent = asyncio.ensure_future(self._serving()), now
        return self._check

    async def _serving(self) -> bool:
        """One health check, not retried: a refusal only means this call waits for its start."""
        try:
            return await self._client.service_client.check_health(
                timeout=timedelta(seconds=self._wait)
            )
        except Exception:
            return False

    async def start(self, begin: Callable[[], Awaitable[T]]) -> T:
        """Run a workflow start within the bounded wait; an unreachable server marks the gate
        and refuses the call (the caller undoes what it prepared)."""
        self.check()
        ticket = object()
        self._waiting[ticket] = time.monotonic()
        try:
            return await self._within_bound(begin)
        finally:
            del self._waiting[ticket]

    async def _within_bound(self, begin: Callable[[], Awaitable[T]]) -> T:
        try:
            async with asyncio.timeout(self._wait):
                while True:
                    try:
                        began = await begin()
                        self._accepted_at = time.monotonic()
                        return began
                    except RPCError as exc:
                        # The SDK's own retries give up on a server that is restarting sooner
                        # than the bound: keep trying until it answers or the bound is spent.
                        # A start may be sent again: `begin` attaches a second send to the
                        # first's run if that landed after all (api/invocation_start.py).
                        if exc.status not in _DOWN:
                            raise
                    await asyncio.sleep(RESTART_POLL_SECONDS)  # a retry interval, not a wait-for
        except TimeoutError:
            self.mark_down("start timed out")
        except RPCError as exc:
            if exc.status not in _DOWN:
                raise self._refused(exc.status) from None
            self.mark_down(exc.status.name)
        raise self.refuse()

    def _refused(self, status: RPCStatusCode) -> Problem:
        """A start the server answered with a refusal: counted and answered as such, the gate
        left open (the server is there). A rate limit is a warning; any other refusal is an
        operator's to look into, logged as an error."""
        if status in _THROTTLED:
            log.warning("workflow start refused: %s", status.name)
        else:
            log.error("workflow start refused, check the Temporal configuration: %s", status.name)
        metrics.refusals.add(1, {"reason": "temporal-refused"})
        return TemporalRefused(status, self.retry_after)

    def mark_down(self, why: str) -> None:
        if self._down_since is None:
            log.warning("temporal unreachable (%s): refusing invocations until it answers", why)
            self._down_since = time.monotonic()
        if self._probe is None or self._probe.done():
            self._probe = asyncio.create_task(self._until_up())

    async def healthy(self) -> bool:
        """One health check, with the SDK's own retries on transient gRPC errors. Without them
        (`check_health` defaults to retry=False) a single transient error on the shared
        connection under load failed readiness in a few milliseconds while the server was up:
        the /readyz flap of issue 19."""
        bound = max(1.0, self._wait)
        try:
            async with asyncio.timeout(bound + 1):
                return await self._client.service_client.check_health(
                    retry=True, timeout=timedelta(seconds=bound)
                )
        except Exception:
            return False

    async def _until_up(self) -> None:
        for _ in itertools.count():
            if await self.healthy():
                break
            await asyncio.sleep(PROBE_INTERVAL_SECONDS)  # a retry interval, not a wait-for
        log.info("temporal reachable again")
        self._down_since = None

    async def aclose(self) -> None:
        for task in (self._probe, self._check):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
