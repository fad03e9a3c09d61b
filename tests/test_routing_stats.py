"""Routing scores what the health probes measure: a deployment's recent latency (p95 of its
successful probes) and success rate (the share of its probes answered), as DESIGN §4 and the
spec's weights say (latency 0.2, history 0.1). Before, no statistics were ever loaded into the
routing snapshot: both terms scored neutral for every deployment, and a slow, failing one won
on its place in the profile's list."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client

from core.settings import Settings
from domain.health import ProbeOutcome, ProbeResult
from providers.upstream import UpstreamServer
from store.db import transaction
from store.probes import record_sample
from tests.conftest import TokenFactory
from tests.helpers.catalog import approved_deployment, profile_event, publish
from tests.helpers.deadline import eventually
from tests.helpers.stack import serve

SLOW, FAST = "rt/slow", "rt/fast"


async def _samples(
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    deployment_id: str,
    outcome: ProbeOutcome,
    latency_ms: int,
    ago: timedelta = timedelta(minutes=2),
) -> None:
    """Ten probe windows two minutes apart, the newest `ago` before now."""
    newest = datetime.now(UTC) - ago
    async with transaction(sessions) as session:
        for i in range(10):
            result = ProbeResult(
                tenant_id=tenant,
                deployment_id=deployment_id,
                outcome=outcome,
                latency_ms=latency_ms,
                error_class=None if outcome is ProbeOutcome.OK else "server",
            )
            await record_sample(session, result, newest - timedelta(minutes=2 * i), 1)


async def _order(http: httpx.AsyncClient) -> list[str]:
    resp = await http.post("/factory/model-profiles/rt/route-plan/preview", json={})
    assert resp.status_code == 200, resp.text
    return [c["deploymentId"] for c in resp.json()["candidates"]]


async def test_a_slow_failing_deployment_ranks_below_a_fast_healthy_one(
    settings: Settings,
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    for deployment_id in (SLOW, FAST):
        await approved_deployment(
            http, auth, temporal_client, tenant, deployment_id, endpointRef=upstream.endpoint_ref
        )
    # The slow one first in the profile's list: with nothing measured, the tie goes to it.
    assert (await publish(http, auth, profile_event("rt", [SLOW, FAST]))).status_code == 200
    own = settings.model_copy(update={"routing_stats_refresh_seconds": 0.2})
    async with serve(own) as api, httpx.AsyncClient(base_url=api.url, headers=auth) as client:
        assert await _order(client) == [SLOW, FAST]
        # Probes answered, slowly and then failing; an hour-old fast sample is past the window.
        await _samples(sessions, tenant, SLOW, ProbeOutcome.OK, 3_000)
        await _samples(sessions, tenant, SLOW, ProbeOutcome.FAILED, 10_000, timedelta(seconds=30))
        await _samples(sessions, tenant, FAST, ProbeOutcome.OK, 40)
        await _samples(sessions, tenant, SLOW, ProbeOutcome.OK, 1, timedelta(minutes=70))

        # Seen once the snapshot's statistics are past their refresh, with no catalog change.
        async def fast_first() -> list[str] | None:
            order = await _order(client)
            return order if order == [FAST, SLOW] else None

        await eventually(fast_first, timeout=20, interval=0.2)
        plan: dict[str, Any] = (
            await client.post("/factory/model-profiles/rt/route-plan/preview", json={})
        ).json()
        fast, slow = plan["candidates"]
        assert fast["score"] > slow["score"], plan
