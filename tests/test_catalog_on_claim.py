"""A call planned on the API process's catalog snapshot has that snapshot's version checked by
its claim (one statement for both): a catalog write committed before the call is seen by the
call, whatever the snapshot held — through the official openai SDK, on the real stack."""

from __future__ import annotations

import uuid

import httpx
import openai
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col
from temporalio.client import Client

from providers.upstream import UpstreamServer
from store.tables import InvocationReceiptRow
from tests.conftest import TokenFactory
from tests.helpers.catalog import approved_deployment, approved_profile, profile_event, publish

DEPLOYMENT = "X-Model-Router-Deployment"


@pytest.fixture
async def auth(token_for: TokenFactory, tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {await token_for(tenant)}"}


async def _ask(sdk: openai.AsyncOpenAI, auth: dict[str, str], profile: str) -> str:
    raw = await sdk.chat.completions.with_raw_response.create(
        model=profile,
        messages=[{"role": "user", "content": "which deployment answers?"}],
        extra_headers={**auth, "Idempotency-Key": f"cc-{uuid.uuid4().hex}"},
    )
    assert raw.parse().choices[0].message.content
    return raw.headers[DEPLOYMENT]


async def test_a_catalog_write_is_seen_by_the_next_call_and_leaves_no_stale_claim(
    api_url: str,
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    at = {"provider": "openai", "model": "cc-sim", "endpointRef": upstream.endpoint_ref}
    await approved_profile(http, auth, temporal_client, tenant, "moving", {"cc/a": at})
    await approved_deployment(http, auth, temporal_client, tenant, "cc/b", **at)
    sdk = openai.AsyncOpenAI(base_url=f"{api_url}/v1", api_key="unused", max_retries=0)
    # Compiles this tenant's snapshot in the API process; the calls below may plan on it.
    assert await _ask(sdk, auth, "moving") == "cc/a"
    assert await _ask(sdk, auth, "moving") == "cc/a"

    # A new version of the profile, on the other deployment, committed before the next call.
    v2 = profile_event("moving", ["cc/b"], version="2")
    assert (await publish(http, auth, v2)).status_code == 200
    assert await _ask(sdk, auth, "moving") == "cc/b"

    # A profile the snapshot never held is found, not refused as unknown.
    event = profile_event("arrived", ["cc/a"])
    assert (await publish(http, auth, event)).status_code == 200
    assert await _ask(sdk, auth, "arrived") == "cc/a"

    # Four calls, four receipts, all closed: a claim refused as stale wrote nothing.
    async with sessions() as session:
        rows = (
            await session.scalars(
                select(InvocationReceiptRow).where(col(InvocationReceiptRow.tenant_id) == tenant)
            )
        ).all()
        assert len(rows) == 4 and all(r.ended_at is not None for r in rows)
