"""Temporal goes away after the API connected, and something that needs a workflow is asked
for: its start is refused. The answer is a 503 saying so, and nothing is left behind that no
workflow will ever serve.

- An evaluation: its row used to stay Running for good, beside a 500. It stays Running still,
  as a start whose answer was lost may have been taken (tests/test_evaluation_failures.py),
  and is settled as never started when read past the start's grace, once Temporal says there
  is no such run.
- A webhook subscription: its row used to stay listed as active for good, with no delivery
  workflow, beside a 500 (a retry made a second one).
- A lifecycle call (register, approve, retire, license): Temporal's refusal went up as a 500."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import select

from core.settings import Settings
from store.tables import EvaluationRow, ModelDeploymentRow
from store.webhook_tables import WebhookSubscriptionRow
from tests.conftest import TokenFactory, free_port
from tests.helpers.catalog import deployment_body, register
from tests.helpers.stack import TemporalDevServer, on_own_temporal, own_temporal, serve, workers


@pytest.fixture
async def temporal_gone(
    tmp_path: Path,
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    token_for: TokenFactory,
    tenant: str,
) -> AsyncIterator[tuple[httpx.AsyncClient, dict[str, str], TemporalDevServer]]:
    """The API and workers on a Temporal of this test's own: the test kills it when ready."""
    async with own_temporal(tmp_path) as dev:
        own = on_own_temporal(settings, dev, "refused")
        async with workers(own, sessions), serve(own) as api:
            auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
            async with httpx.AsyncClient(base_url=api.url, timeout=120) as http:
                yield http, auth, dev


async def _kept(
    sessions: async_sessionmaker[AsyncSession],
    table: type[EvaluationRow] | type[WebhookSubscriptionRow],
    tenant: str,
) -> list[Any]:
    """The tenant's rows of `table` left in the store."""
    async with sessions() as session:
        return list((await session.scalars(select(table).where(table.tenant_id == tenant))).all())


async def test_an_evaluation_whose_start_is_refused_is_a_503_naming_the_key(
    temporal_gone: tuple[httpx.AsyncClient, dict[str, str], TemporalDevServer],
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
) -> None:
    http, auth, dev = temporal_gone
    await register(http, auth, "es/sim")
    dev.kill()
    refused = await http.post(
        "/factory/model-deployments/es/sim/evaluate",
        headers={**auth, "Idempotency-Key": "eval-1"},
    )
    assert refused.status_code == 503, refused.text
    assert "same key" in refused.json()["detail"]
    # Kept Running: with Temporal away, nothing says whether the start was taken.
    rows = await _kept(sessions, EvaluationRow, tenant)
    assert [(r.deployment_id, r.status) for r in rows] == [("es/sim", "Running")]


async def test_a_subscription_whose_delivery_start_is_refused_is_a_503_and_not_kept(
    temporal_gone: tuple[httpx.AsyncClient, dict[str, str], TemporalDevServer],
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
) -> None:
    http, auth, dev = temporal_gone
    dev.kill()
    refused = await http.post(
        "/factory/webhook-subscriptions",
        json={"url": f"http://127.0.0.1:{free_port()}/hook"},  # a receiver is never reached
        headers=auth,
    )
    assert refused.status_code == 503, refused.text
    assert refused.headers["Retry-After"] and "not created" in refused.json()["detail"]
    assert (await http.get("/factory/webhook-subscriptions", headers=auth)).json() == []
    assert await _kept(sessions, WebhookSubscriptionRow, tenant) == []


async def test_lifecycle_calls_temporal_does_not_answer_are_a_503_and_change_nothing(
    temporal_gone: tuple[httpx.AsyncClient, dict[str, str], TemporalDevServer],
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
) -> None:
    http, auth, dev = temporal_gone
    await register(http, auth, "lc/sim")
    dev.kill()
    calls = [
        http.post("/factory/model-deployments/lc/sim/approve", headers=auth),
        http.post(
            "/factory/model-deployments",
            json=deployment_body("lc/other"),
            headers={**auth, "Idempotency-Key": "lc-other"},
        ),
    ]
    for call in calls:
        refused = await call
        assert refused.status_code == 503, refused.text
        assert refused.headers["Retry-After"] == "5"
        assert refused.json()["type"].endswith("/temporal-unavailable")
        assert refused.json()["reason"] == "temporal-unreachable"
    async with sessions() as session:
        rows = (
            await session.scalars(
                select(ModelDeploymentRow).where(ModelDeploymentRow.tenant_id == tenant)
            )
        ).all()
    assert [(r.deployment_id, r.state.value) for r in rows] == [("lc/sim", "Candidate")]
