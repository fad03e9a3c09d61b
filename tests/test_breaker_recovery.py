"""The recovery trials a process runs after its breaker reported a deployment Degraded, against
the real lifecycle workflow and the local upstream: bounded in time, handing over to the health
probe when they give up, or when a deployment they brought back fails again within their window,
and cancelled on shutdown. (The whole loop through the gateway — Degraded, healed, Approved
within seconds — is in tests/test_resilience.py.)"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client

from activities.breaker_recovery import BreakerRecovery
from activities.lifecycle_client import LifecycleClient
from activities.resilience import BreakerRegistry
from core.settings import Settings
from domain.breaker import BreakerState
from domain.lifecycle import Transition
from providers.secrets import default_broker
from providers.upstream import Fault, FaultKind, UpstreamServer
from tests.conftest import TokenFactory
from tests.helpers.catalog import approved_deployment
from tests.helpers.deadline import eventually

MODEL, DEPLOYMENT = "rb-primary", "rb/a"
COOLDOWN = 0.2


@pytest.fixture
async def auth(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
) -> dict[str, str]:
    upstream.state.clear_faults()
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    await approved_deployment(
        http,
        auth,
        temporal_client,
        tenant,
        DEPLOYMENT,
        model=MODEL,
        endpointRef=upstream.endpoint_ref,
    )
    return auth


@pytest.fixture
async def breakers() -> BreakerRegistry:
    return BreakerRegistry(threshold=1, cooldown=COOLDOWN)


def _recovery(
    client: Client,
    sessions: async_sessionmaker[AsyncSession],
    breakers: BreakerRegistry,
    window: float,
    clock: Callable[[], float] = time.monotonic,
) -> BreakerRecovery:
    return BreakerRecovery(
        client,
        sessions,
        breakers,
        default_broker(allow_upstream=True),
        cooldown=COOLDOWN,
        window=window,
        trial_timeout=2.0,
        clock=clock,
    )


@pytest.fixture
async def recoveries() -> AsyncIterator[list[BreakerRecovery]]:
    made: list[BreakerRecovery] = []
    yield made
    for recovery in made:
        await recovery.aclose()


async def _sustained_failure(breakers: BreakerRegistry, tenant: str) -> None:
    breaker = breakers.get(tenant, DEPLOYMENT)
    breaker.failure()  # threshold 1: open
    await eventually(breaker.allow)  # the cool-down passed: one trial let through
    breaker.failure()  # the trial failed: reported to the lifecycle


async def _state(http: httpx.AsyncClient, auth: dict[str, str]) -> str:
    got = (await http.get(f"/factory/model-deployments/{DEPLOYMENT}", headers=auth)).json()
    return str(got["state"])


async def test_trials_stop_after_their_window_and_leave_the_deployment_to_the_probe(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    temporal_client: Client,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    breakers: BreakerRegistry,
    recoveries: list[BreakerRecovery],
) -> None:
    upstream.inject(MODEL, Fault(kind=FaultKind.UNAVAILABLE))
    recovery = _recovery(temporal_client, sessions, breakers, window=1.0)
    recoveries.append(recovery)
    before = upstream.requests(MODEL)
    await _sustained_failure(breakers, tenant)

    async def degraded() -> bool:
        return await _state(http, auth) == "Degraded"

    await eventually(degraded, timeout=10)

    def gave_up() -> bool:
        tried = upstream.requests(MODEL) > before
        return tried and recovery.next_trial_in(tenant, [DEPLOYMENT]) is None

    await eventually(gave_up)
    trials = upstream.requests(MODEL) - before
    assert 1 <= trials <= 1.0 / COOLDOWN  # one per cool-down within the window, no more
    assert await _state(http, auth) == "Degraded"  # left as it was, for the health probe
    # And this process's breaker with it: kept open, it refused the calls the probe lets back
    # once it approves the deployment again, but one trial per cool-down.
    assert breakers.get(tenant, DEPLOYMENT).state is BreakerState.CLOSED

    # Having given up, the process treats a later sustained failure as news: it reports and
    # trials again, and a healed provider is back at the next trial.
    await _sustained_failure(breakers, tenant)
    await eventually(lambda: recovery.next_trial_in(tenant, [DEPLOYMENT]) is not None)
    upstream.state.clear_faults(MODEL)

    async def approved() -> bool:
        return await _state(http, auth) == "Approved"

    await eventually(approved, timeout=10)
    assert breakers.get(tenant, DEPLOYMENT).state is BreakerState.CLOSED


async def test_a_report_the_lifecycle_did_not_take_keeps_the_breaker_after_giving_up(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    breakers: BreakerRegistry,
    recoveries: list[BreakerRecovery],
) -> None:
    # Temporal never took the Degraded report (here: a namespace that does not exist), so the
    # deployment is still routed: dropped, the breaker let every call back onto a provider
    # still down; kept open, it holds them off to one trial per cool-down.
    away = await Client.connect(settings.temporal_address, namespace="no-such-namespace")
    upstream.inject(MODEL, Fault(kind=FaultKind.UNAVAILABLE))
    recovery = _recovery(away, sessions, breakers, window=1.0)
    recoveries.append(recovery)
    before = upstream.requests(MODEL)
    await _sustained_failure(breakers, tenant)

    def gave_up() -> bool:
        tried = upstream.requests(MODEL) > before
        return tried and recovery.next_trial_in(tenant, [DEPLOYMENT]) is None

    try:
        await eventually(gave_up)
    finally:
        upstream.state.clear_faults(MODEL)
    assert await _state(http, auth) == "Approved"  # the report never landed
    assert breakers.get(tenant, DEPLOYMENT).state is BreakerState.OPEN


async def test_shutdown_cancels_the_trials(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    temporal_client: Client,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    breakers: BreakerRegistry,
) -> None:
    upstream.inject(MODEL, Fault(kind=FaultKind.UNAVAILABLE))
    recovery = _recovery(temporal_client, sessions, breakers, window=600.0)
    try:
        await _sustained_failure(breakers, tenant)
        await eventually(lambda: recovery.next_trial_in(tenant, [DEPLOYMENT]) is not None)
    finally:
        await recovery.aclose()
        upstream.state.clear_faults(MODEL)
    assert recovery.next_trial_in(tenant, [DEPLOYMENT]) is None
    # Cancelled, not recovered: the breaker stays open and the deployment Degraded.
    assert breakers.get(tenant, DEPLOYMENT).state is BreakerState.OPEN


async def test_a_deployment_its_trials_brought_back_that_fails_again_is_left_to_the_probe(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    temporal_client: Client,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    breakers: BreakerRegistry,
    recoveries: list[BreakerRecovery],
) -> None:
    # A deployment that answers the trial's one-token request but fails real traffic (a server
    # erroring on long prompts): trialled back each time, it went Degraded and Approved every
    # 15-60 s, two events, two webhooks and a catalog rebuild for every tenant each cycle.
    # The window is read on the recovery's clock, which only this test moves.
    now = [0.0]
    window = 60.0
    recovery = _recovery(temporal_client, sessions, breakers, window, clock=lambda: now[0])
    recoveries.append(recovery)
    reports: list[bool] = []
    send = breakers.report
    assert send is not None

    def counted(tenant_id: str, deployment_id: str, healthy: bool) -> None:
        reports.append(healthy)
        send(tenant_id, deployment_id, healthy)

    breakers.report = counted

    async def state_is(state: str) -> bool:
        return await _state(http, auth) == state

    upstream.inject(MODEL, Fault(kind=FaultKind.UNAVAILABLE))
    await _sustained_failure(breakers, tenant)
    await eventually(lambda: state_is("Degraded"), timeout=10)  # not the Approved before it
    await eventually(lambda: recovery.next_trial_in(tenant, [DEPLOYMENT]) is not None)
    upstream.state.clear_faults(MODEL)  # the ping answers: brought back by a trial
    await eventually(lambda: state_is("Approved"), timeout=10)
    await eventually(lambda: not recovery.trialling(tenant, DEPLOYMENT))

    # Real traffic fails again within the window: reported Degraded once, and no trial sent,
    # so no trial's success can report it recovered; the scheduled probe judges it.
    upstream.inject(MODEL, Fault(kind=FaultKind.UNAVAILABLE))
    before = upstream.requests(MODEL)
    await _sustained_failure(breakers, tenant)
    upstream.state.clear_faults(MODEL)  # the ping would pass
    await eventually(lambda: not recovery.trialling(tenant, DEPLOYMENT))
    assert await _state(http, auth) == "Degraded"
    assert upstream.requests(MODEL) == before
    assert reports == [False, True, False]
    # Handed over as when the trials give up: the breaker is dropped with the report.
    assert breakers.get(tenant, DEPLOYMENT).state is BreakerState.CLOSED

    # Past the window the trials' recovery is forgotten: a later sustained failure is trialled
    # back as before. (The probe's own recovery is stood in for by the lifecycle here.)
    await LifecycleClient(temporal_client).transition(
        tenant, DEPLOYMENT, Transition.PROBE_RECOVERED
    )
    now[0] += window
    upstream.inject(MODEL, Fault(kind=FaultKind.UNAVAILABLE))
    await _sustained_failure(breakers, tenant)
    # Its Degraded landed first: read before it, the Approved the lifecycle stood in for the
    # probe's recovery with passed for the trial's.
    await eventually(lambda: state_is("Degraded"), timeout=10)
    await eventually(lambda: recovery.next_trial_in(tenant, [DEPLOYMENT]) is not None)
    upstream.state.clear_faults(MODEL)
    await eventually(lambda: state_is("Approved"), timeout=10)
    assert reports == [False, True, False, False, True]
