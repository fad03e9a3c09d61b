"""Temporal goes away after the API connected, and an evaluation is asked for: its start is
refused. The answer is a 503 saying so (retry with the same key), and no evaluation is left
Running: its row used to be written before the start and stay Running for good, with no
workflow to end it, beside a 500."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col, select

from core.settings import Settings
from store.tables import EvaluationRow
from tests.conftest import TokenFactory
from tests.helpers.catalog import register
from tests.helpers.stack import TemporalDevServer, serve, workers


async def test_an_evaluation_whose_start_is_refused_is_a_503_and_leaves_no_run(
    tmp_path: Path,
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    token_for: TokenFactory,
    tenant: str,
) -> None:
    dev = TemporalDevServer(tmp_path)
    dev.start()
    try:
        await dev.wait_serving()
        run = uuid.uuid4().hex[:8]
        own = settings.model_copy(
            update={
                "temporal_address": dev.address,
                "temporal_task_queue": f"evalstart-{run}",
                "temporal_invocation_task_queue": f"evalstart-inv-{run}",
            }
        )
        async with workers(own, sessions), serve(own) as api:
            auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
            async with httpx.AsyncClient(base_url=api.url, timeout=120) as http:
                await register(http, auth, "es/sim")
                dev.kill()
                refused = await http.post(
                    "/factory/model-deployments/es/sim/evaluate",
                    headers={**auth, "Idempotency-Key": "eval-1"},
                )
    finally:
        dev.kill()
    assert refused.status_code == 503, refused.text
    assert "same key" in refused.json()["detail"]
    async with sessions() as session:
        rows = (
            await session.scalars(
                select(EvaluationRow).where(col(EvaluationRow.tenant_id) == tenant)
            )
        ).all()
    assert rows == []
