"""A broken artifact volume does not fail the calls the provider answered: the caller gets its
answer and the receipt closes Completed with its reference (a replay of that key then finds no
stored answer, as once retention removed it), and the failure is logged without content. The
answer's file is written while the receipt's close is at the database (activities/invoke.py)."""

from __future__ import annotations

import logging
import uuid

import httpx
import openai
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client

from core.settings import Settings
from domain.enums import InvocationOutcome
from providers.upstream import UpstreamServer
from tests.conftest import TokenFactory
from tests.helpers.catalog import approved_profile
from tests.helpers.surfaces import receipt

SECRET = "the-words-of-this-prompt"


async def test_an_answer_whose_file_cannot_be_written_still_reaches_the_caller(
    api_url: str,
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    caplog: pytest.LogCaptureFixture,
) -> None:
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    at = {"provider": "openai", "model": "av-sim", "endpointRef": upstream.endpoint_ref}
    await approved_profile(http, auth, temporal_client, tenant, "filed", {"av/a": at})
    # The tenant's artifact folder cannot be made: a file stands where it would be.
    settings.artifact_root.mkdir(parents=True, exist_ok=True)
    (settings.artifact_root / tenant).write_bytes(b"not a folder")
    sdk = openai.AsyncOpenAI(base_url=f"{api_url}/v1", api_key="unused", max_retries=0)
    key = f"av-{uuid.uuid4().hex}"
    with caplog.at_level(logging.ERROR, logger="model_router.invoke"):
        done = await sdk.chat.completions.create(
            model="filed",
            messages=[{"role": "user", "content": SECRET}],
            extra_headers={**auth, "Idempotency-Key": key},
        )
    assert done.choices[0].message.content
    row = await receipt(sessions, tenant, key)
    assert row.outcome is InvocationOutcome.COMPLETED and row.ended_at is not None
    assert row.output_artifact_ref is not None and row.output_artifact_ref.startswith("sha256:")
    assert any("output artifact not written" in r.getMessage() for r in caplog.records)
    assert SECRET not in caplog.text
