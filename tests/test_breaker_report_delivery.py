"""How a breaker's reports reach the lifecycle when its worker does not answer: each bounded in
time, so a worker that is down holds neither the trials nor the reports queued behind it. On a
real Temporal dev server, the deployment's lifecycle workflow started on a task queue nobody
polls (an update then waits for a worker for ever); an injected breaker clock; no trials
(window 0), so nothing else reaches the lifecycle."""

from __future__ import annotations

import uuid
from typing import cast

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client

from activities.breaker_recovery import BreakerRecovery
from activities.lifecycle_types import WORKFLOW_NAME, workflow_id
from activities.resilience import BreakerRegistry
from domain.breaker import relapsed
from providers.secrets import default_broker
from tests.helpers.deadline import eventually

COOLDOWN = 5.0


async def test_a_report_the_lifecycle_worker_never_answers_is_given_up_at_its_bound(
    temporal_client: Client, tenant: str
) -> None:
    # Unbounded, the Degraded report waited for ever, and the Recovered report (and the trials)
    # queued behind it with it: `reporting` stayed true.
    deployment = "rb/unanswered"
    handle = await temporal_client.start_workflow(
        WORKFLOW_NAME,
        "never run",
        id=workflow_id(tenant, deployment),
        task_queue=f"unpolled-{uuid.uuid4().hex[:8]}",
    )
    now = [0.0]
    registry = BreakerRegistry(threshold=1, cooldown=COOLDOWN, clock=lambda: now[0])
    recovery = BreakerRecovery(
        temporal_client,
        cast(async_sessionmaker[AsyncSession], None),  # no trials: window 0
        registry,
        default_broker(allow_upstream=True),
        cooldown=COOLDOWN,
        window=0,
        trial_timeout=1.0,
        report_timeout=0.5,
        recovered_retries=(0.1,),
    )
    breaker = registry.get(tenant, deployment)
    try:
        breaker.failure()
        now[0] += COOLDOWN
        assert breaker.allow()
        breaker.failure()  # the trial failed: reported Degraded
        now[0] += COOLDOWN
        assert breaker.allow()
        breaker.success()  # reported recovered, behind the Degraded report
        assert recovery.reporting(tenant, deployment)
        await eventually(lambda: not recovery.reporting(tenant, deployment))
    finally:
        await recovery.aclose()
        await handle.terminate()


def test_relapsed_is_within_the_window_of_the_trials_recovery_only() -> None:
    assert relapsed(100.0, 100.0, 300.0)
    assert relapsed(100.0, 399.9, 300.0)
    assert not relapsed(100.0, 400.0, 300.0)
    assert not relapsed(None, 100.0, 300.0)  # never brought back here, or forgotten
