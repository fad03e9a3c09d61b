"""Usage the provider did not report is our estimate, and a non-stream response says so, as the
stream's final event does: `model_router.usageStatus` in the body and the
`X-Model-Router-Usage-Status` header, both equal to the receipt's usage status."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from openai import AsyncOpenAI
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client

from providers.upstream import Fault, FaultKind, UpstreamServer
from store.tables import InvocationReceiptRow
from tests.conftest import TokenFactory
from tests.helpers.catalog import approved_deployment, profile_event, publish

QUIET, TALKY = "ue-no-usage", "ue-usage"  # upstream models: one omits usage, one reports it


@pytest.fixture
async def sdk(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
    api_url: str,
) -> AsyncIterator[AsyncOpenAI]:
    token = await token_for(tenant)
    auth = {"Authorization": f"Bearer {token}"}
    for dep, model in (("ue/quiet", QUIET), ("ue/talky", TALKY)):
        await approved_deployment(
            http, auth, temporal_client, tenant, dep, model=model, endpointRef=upstream.endpoint_ref
        )
    for profile, dep in (("ue-quiet", "ue/quiet"), ("ue-talky", "ue/talky")):
        assert (await publish(http, auth, profile_event(profile, [dep]))).status_code == 200
    upstream.state.clear_faults(QUIET)
    upstream.inject(QUIET, Fault(kind=FaultKind.NO_USAGE))
    async with AsyncOpenAI(base_url=f"{api_url}/v1", api_key=token, max_retries=0) as client:
        yield client
    upstream.state.clear_faults(QUIET)


async def _receipt(
    sessions: async_sessionmaker[AsyncSession], receipt_id: str
) -> InvocationReceiptRow:
    async with sessions() as s:
        row = await s.get(InvocationReceiptRow, uuid.UUID(receipt_id))
    assert row is not None
    return row


async def test_a_non_stream_answer_says_its_usage_is_an_estimate(
    sdk: AsyncOpenAI, sessions: async_sessionmaker[AsyncSession]
) -> None:
    raw = await sdk.chat.completions.with_raw_response.create(
        model="ue-quiet", messages=[{"role": "user", "content": "four words of prompt"}]
    )
    completion = raw.parse()
    assert completion.usage is not None and completion.usage.prompt_tokens > 0
    row = await _receipt(sessions, raw.headers["x-model-router-receipt-id"])
    assert row.usage_status == "Estimated"
    assert raw.headers["x-model-router-usage-status"] == "Estimated"
    assert (completion.model_extra or {})["model_router"]["usageStatus"] == "Estimated"

    # Reported usage says so too, so a client can tell the two apart.
    raw = await sdk.chat.completions.with_raw_response.create(
        model="ue-talky", messages=[{"role": "user", "content": "four words of prompt"}]
    )
    row = await _receipt(sessions, raw.headers["x-model-router-receipt-id"])
    assert row.usage_status == "Reported"
    assert raw.headers["x-model-router-usage-status"] == "Reported"
    assert (raw.parse().model_extra or {})["model_router"]["usageStatus"] == "Reported"


async def test_the_stream_and_the_non_stream_answer_agree(sdk: AsyncOpenAI) -> None:
    stream = await sdk.chat.completions.create(
        model="ue-quiet", messages=[{"role": "user", "content": "hello"}], stream=True
    )
    final = None
    async for chunk in stream:
        final = (chunk.model_extra or {}).get("model_router") or final
    assert final is not None and final["usageStatus"] == "Estimated"
