"""A profile's modality is enforced before routing: embeddings on a Chat profile, chat on an
Embedding profile, rerank on a Chat profile are each a 400 naming the field that carries the
profile id and the profile's modality — with no adapter call, no receipt, no pinned plan."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import anthropic
import httpx
import openai
import pytest
from openai import AsyncOpenAI
from sqlalchemy import func
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col, select
from temporalio.client import Client

from providers.upstream import UpstreamServer
from store.tables import InvocationReceiptRow, RoutePlanRow
from tests.conftest import TokenFactory
from tests.helpers.catalog import profile_event, publish, record_evidence, register


@pytest.fixture
async def auth(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
) -> dict[str, str]:
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    for dep, model, provider in (
        ("md/chat", "md-chat", "openai"),
        ("md/embed", "md-embed", "openai"),
        ("md/rerank", "md-rerank", "rerank"),
    ):
        await register(
            http, auth, dep, model=model, provider=provider, endpointRef=upstream.endpoint_ref
        )
        await record_evidence(temporal_client, tenant, dep, {"tool-calling": 0.9})
        approved = await http.post(f"/factory/model-deployments/{dep}/approve", headers=auth)
        assert approved.status_code == 200, approved.text
    for profile, dep, modality in (
        ("md-chat", "md/chat", "Chat"),
        ("md-embed", "md/embed", "Embedding"),
        ("md-rerank", "md/rerank", "Rerank"),
    ):
        event = profile_event(profile, [dep], {}, modality=modality)
        assert (await publish(http, auth, event)).status_code == 200
    return auth


@pytest.fixture
async def sdk(api_url: str, auth: dict[str, str]) -> AsyncIterator[AsyncOpenAI]:
    token = auth["Authorization"].removeprefix("Bearer ")
    async with AsyncOpenAI(base_url=f"{api_url}/v1", api_key=token, max_retries=0) as client:
        yield client


async def _nothing_written(
    sessions: async_sessionmaker[AsyncSession], tenant: str
) -> tuple[int, int]:
    async with sessions() as s:
        receipts = await s.scalar(
            select(func.count())
            .select_from(InvocationReceiptRow)
            .where(col(InvocationReceiptRow.tenant_id) == tenant)
        )
        plans = await s.scalar(
            select(func.count())
            .select_from(RoutePlanRow)
            .where(col(RoutePlanRow.tenant_id) == tenant)
        )
    return receipts or 0, plans or 0


def _problem(body: dict[str, object], field: str, modality: str, needed: str) -> None:
    assert body["field"] == field
    assert body["modality"] == modality and body["requiredModality"] == needed
    assert body["type"] == "https://model-router.dev/problems/modality-mismatch"
    assert modality in str(body["detail"]) and needed in str(body["detail"])


async def test_the_openai_surface_refuses_a_profile_of_another_modality(
    sdk: AsyncOpenAI,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
) -> None:
    seen = upstream.requests()
    headers = {"X-Run-Id": str(uuid.uuid4()), "Idempotency-Key": f"md-{uuid.uuid4().hex}"}
    with pytest.raises(openai.BadRequestError) as embed_on_chat:
        await sdk.embeddings.create(
            model="md-chat", input="four words of text", extra_headers=headers
        )
    assert embed_on_chat.value.status_code == 400
    assert "Chat profile" in embed_on_chat.value.message
    body = embed_on_chat.value.response.json()
    assert embed_on_chat.value.response.headers["content-type"].startswith(
        "application/problem+json"
    )
    _problem(body, "body.model", "Chat", "Embedding")
    assert body["error"]["param"] == "model"

    with pytest.raises(openai.BadRequestError) as chat_on_embed:
        await sdk.chat.completions.create(
            model="md-embed",
            messages=[{"role": "user", "content": "hello"}],
            extra_headers={"X-Run-Id": str(uuid.uuid4())},
        )
    _problem(chat_on_embed.value.response.json(), "body.model", "Embedding", "Chat")
    with pytest.raises(openai.BadRequestError) as stream_on_rerank:
        await sdk.chat.completions.create(
            model="md-rerank", messages=[{"role": "user", "content": "hello"}], stream=True
        )
    _problem(stream_on_rerank.value.response.json(), "body.model", "Rerank", "Chat")

    assert upstream.requests() == seen  # no adapter was called
    assert await _nothing_written(sessions, tenant) == (0, 0)  # no receipt, no pinned plan

    # The right modality is served as before.
    ok = await sdk.embeddings.create(model="md-embed", input="four words of text")
    assert ok.data and upstream.requests() == seen + 1


async def test_the_gateway_refuses_a_profile_of_another_modality(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
) -> None:
    seen = upstream.requests()
    scope = {"runId": str(uuid.uuid4()), "idempotencyKey": f"md-{uuid.uuid4().hex}"}
    rerank = await http.post(
        "/gateway/rerank",
        headers=auth,
        json={"profileId": "md-chat", "query": "q", "documents": ["a", "b"], **scope},
    )
    assert rerank.status_code == 400, rerank.text
    _problem(rerank.json(), "body.profileId", "Chat", "Rerank")
    embed = await http.post(
        "/gateway/embed", headers=auth, json={"profileId": "md-rerank", "inputs": ["a"]}
    )
    assert embed.status_code == 400
    _problem(embed.json(), "body.profileId", "Rerank", "Embedding")
    invoke = await http.post(
        "/gateway/invoke",
        headers=auth,
        json={"profileId": "md-embed", "request": {"messages": [{"role": "user", "content": "x"}]}},
    )
    assert invoke.status_code == 400
    _problem(invoke.json(), "body.profileId", "Embedding", "Chat")
    assert upstream.requests() == seen
    assert await _nothing_written(sessions, tenant) == (0, 0)


async def test_token_counting_refuses_a_profile_of_another_modality(
    api_url: str, auth: dict[str, str], upstream: UpstreamServer
) -> None:
    # Counting routes as a chat call does: an Embedding profile is refused in Anthropic's
    # envelope, and its deployment never sees the prompt.
    seen = upstream.requests()
    token = auth["Authorization"].removeprefix("Bearer ")
    async with anthropic.AsyncAnthropic(base_url=api_url, api_key=token, max_retries=0) as sdk:
        with pytest.raises(anthropic.BadRequestError) as counted:
            await sdk.messages.count_tokens(
                model="md-embed", messages=[{"role": "user", "content": "how many tokens"}]
            )
        assert counted.value.status_code == 400
        body = counted.value.response.json()
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
        assert body["field"] == "body.model" and body["modality"] == "Embedding"
        assert upstream.requests() == seen
        # A Chat profile is counted (by our estimate: the simulator's OpenAI protocol has none).
        ok = await sdk.messages.with_raw_response.count_tokens(
            model="md-chat", messages=[{"role": "user", "content": "how many tokens"}]
        )
        assert ok.headers["x-model-router-token-count"] == "estimate"
        assert (await ok.parse()).input_tokens > 0
