"""How a breaker's reports reach the lifecycle when it does not answer: each bounded in time, so
a worker that is down holds neither the trials nor the reports queued behind it; and a Recovered
report that got no answer sent again a few times, never a refused one. On a stand-in for the
Temporal client (the reports' only way out), an injected breaker clock and no waits between
the attempts; no trials (window 0), so nothing else reaches the lifecycle."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client, WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.service import RPCError, RPCStatusCode

from activities.breaker_recovery import BreakerRecovery
from activities.lifecycle_types import UPDATE_OF
from activities.resilience import BreakerRegistry
from domain.breaker import relapsed
from domain.lifecycle import Transition
from providers.secrets import default_broker
from tests.helpers.deadline import UNBOUNDED, eventually

COOLDOWN = 5.0
FAILED, RECOVERED = UPDATE_OF[Transition.PROBE_FAILED], UPDATE_OF[Transition.PROBE_RECOVERED]
Answer = Callable[[str], Awaitable[None]]


class _Temporal:
    """Answers each lifecycle update with `answer(update name)`, and keeps the names sent."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.sent: list[str] = []

    def get_workflow_handle(self, _workflow_id: str) -> _Temporal:
        return self

    async def execute_update(self, update: str, **_: Any) -> None:
        self.sent.append(update)
        await self.answer(update)


class _Breakers:
    def __init__(self) -> None:
        self.now = [0.0]
        self.registry = BreakerRegistry(threshold=1, cooldown=COOLDOWN, clock=lambda: self.now[0])
        self.breaker = self.registry.get("t", "a")

    def sustained_failure(self) -> None:
        self.breaker.failure()
        self.now[0] += COOLDOWN
        assert self.breaker.allow()
        self.breaker.failure()  # the trial failed: reported Degraded

    def recovered(self) -> None:
        self.now[0] += COOLDOWN
        assert self.breaker.allow()
        self.breaker.success()  # reported recovered


@pytest.fixture
async def made() -> AsyncIterator[list[BreakerRecovery]]:
    recoveries: list[BreakerRecovery] = []
    yield recoveries
    for recovery in recoveries:
        await recovery.aclose()


def _recovery(
    made: list[BreakerRecovery], temporal: _Temporal, breakers: _Breakers, **options: Any
) -> BreakerRecovery:
    recovery = BreakerRecovery(
        cast(Client, temporal),
        cast(async_sessionmaker[AsyncSession], None),  # no trials: window 0
        breakers.registry,
        default_broker(allow_upstream=True),
        cooldown=COOLDOWN,
        window=0,
        trial_timeout=1.0,
        **options,
    )
    made.append(recovery)
    return recovery


async def test_a_report_the_worker_never_answers_is_given_up_at_its_bound(
    made: list[BreakerRecovery],
) -> None:
    # The lifecycle worker down: unbounded, the Degraded report waited for ever, and the
    # Recovered report queued behind it (as the trials that wait on it) with it.
    async def answer(update: str) -> None:
        if update == FAILED:
            await asyncio.Event().wait()

    temporal, breakers = _Temporal(answer), _Breakers()
    recovery = _recovery(made, temporal, breakers, report_timeout=0.05)
    breakers.sustained_failure()
    breakers.recovered()
    await eventually(lambda: not recovery.reporting("t", "a"), timeout=UNBOUNDED)
    assert temporal.sent == [FAILED, RECOVERED]


async def test_a_recovered_report_without_an_answer_is_sent_again(
    made: list[BreakerRecovery],
) -> None:
    # Once its breaker is closed nothing else in this process reports the deployment back:
    # a report lost to a worker restart left it Degraded until the scheduled probe.
    unanswered = [2]

    async def answer(update: str) -> None:
        if update == RECOVERED and unanswered[0] > 0:
            unanswered[0] -= 1
            raise RPCError("worker away", RPCStatusCode.UNAVAILABLE, b"")

    temporal, breakers = _Temporal(answer), _Breakers()
    recovery = _recovery(made, temporal, breakers, recovered_retries=(0.0, 0.0, 0.0))
    breakers.sustained_failure()
    breakers.recovered()
    await eventually(lambda: not recovery.reporting("t", "a"))
    assert temporal.sent == [FAILED, RECOVERED, RECOVERED, RECOVERED]


@pytest.mark.parametrize(
    ("status", "attempts"),
    [
        (RPCStatusCode.UNAVAILABLE, 4),  # no answer: sent again, a bounded number of times
        (RPCStatusCode.NOT_FOUND, 1),  # the workflow is gone (retired): nothing to send again
    ],
)
async def test_a_recovered_report_is_sent_again_a_bounded_number_of_times(
    made: list[BreakerRecovery], status: RPCStatusCode, attempts: int
) -> None:
    async def answer(update: str) -> None:
        if update == RECOVERED:
            raise RPCError("no", status, b"")

    temporal, breakers = _Temporal(answer), _Breakers()
    recovery = _recovery(made, temporal, breakers, recovered_retries=(0.0, 0.0, 0.0))
    breakers.sustained_failure()
    breakers.recovered()
    await eventually(lambda: not recovery.reporting("t", "a"))
    assert temporal.sent == [FAILED] + [RECOVERED] * attempts


async def test_a_degraded_report_is_not_sent_again(made: list[BreakerRecovery]) -> None:
    # Lost, it leaves the deployment routed; this process's breaker keeps its own calls off,
    # and its next failed trial reports again.
    async def answer(_update: str) -> None:
        raise RPCError("worker away", RPCStatusCode.UNAVAILABLE, b"")

    temporal, breakers = _Temporal(answer), _Breakers()
    recovery = _recovery(made, temporal, breakers, recovered_retries=(0.0, 0.0, 0.0))
    breakers.sustained_failure()
    await eventually(lambda: not recovery.reporting("t", "a"))
    assert temporal.sent == [FAILED]


async def test_shutdown_ends_a_report_being_sent_again(made: list[BreakerRecovery]) -> None:
    # The SDK ends an update's wait, cancelled, with its own error: taken for a lost answer,
    # the report was sent again and shutdown waited out every retry and bound (about 70 s).
    # (On Python 3.11 the bound's `wait_for` raises the cancellation itself; from 3.12 it
    # passes the SDK's error on.)
    async def answer(update: str) -> None:
        if update == RECOVERED:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                raise WorkflowUpdateRPCTimeoutOrCancelledError() from None

    temporal, breakers = _Temporal(answer), _Breakers()
    recovery = _recovery(made, temporal, breakers)  # the bound and the retries as deployed
    breakers.sustained_failure()
    breakers.recovered()
    await eventually(lambda: temporal.sent == [FAILED, RECOVERED])
    await asyncio.wait_for(recovery.aclose(), UNBOUNDED)
    assert not recovery.reporting("t", "a")
    assert temporal.sent == [FAILED, RECOVERED]


def test_relapsed_is_within_the_window_of_the_trials_recovery_only() -> None:
    assert relapsed(100.0, 100.0, 300.0)
    assert relapsed(100.0, 399.9, 300.0)
    assert not relapsed(100.0, 400.0, 300.0)
    assert not relapsed(None, 100.0, 300.0)  # never brought back here, or forgotten
