"""A call's project is named by the `X-Project-Id` header (the agent-native surfaces) or the
body's `projectId` (`/gateway/*`), "default" when absent. An empty one names no project: it is
refused as a validation error naming its field, on every surface and in the envelope its SDK
reads, before anything is claimed or called. Before, it was taken, and the receipt and the
usage statements grouped the call under a project called "".
"""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import openai
import pytest
from anthropic import AsyncAnthropic
from openai import AsyncOpenAI
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col, select

from providers.upstream import UpstreamServer
from store.tables import InvocationReceiptRow
from tests.conftest import TokenFactory
from tests.helpers.surfaces import Catalog

EMPTY = {"X-Project-Id": ""}
HI: Any = [{"role": "user", "content": "hi"}]


async def _receipts(sessions: async_sessionmaker[AsyncSession], tenant: str) -> list[str]:
    """The project of every receipt the tenant has."""
    async with sessions() as session:
        found = await session.scalars(
            select(col(InvocationReceiptRow.project_id)).where(
                col(InvocationReceiptRow.tenant_id) == tenant
            )
        )
    return list(found)


async def test_an_empty_project_is_refused_naming_its_field_on_every_surface(
    http: httpx.AsyncClient,
    api_url: str,
    token_for: TokenFactory,
    catalog: Catalog,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
) -> None:
    profile, token = catalog.profile("openai"), await token_for(tenant)
    calls = upstream.state.stats.total
    async with AsyncOpenAI(base_url=f"{api_url}/v1", api_key=token, max_retries=0) as oai:
        with pytest.raises(openai.BadRequestError) as chat:
            await oai.chat.completions.create(model=profile, messages=HI, extra_headers=EMPTY)
        with pytest.raises(openai.BadRequestError) as responses:
            await oai.responses.create(model=profile, input="hi", extra_headers=EMPTY)
        with pytest.raises(openai.BadRequestError) as embeddings:
            await oai.embeddings.create(model=profile, input=["hi"], extra_headers=EMPTY)
    for refused in (chat, responses, embeddings):
        fields = [e["field"] for e in refused.value.response.json()["errors"]]
        assert fields == ["header.X-Project-Id"], refused.value.response.text
    async with AsyncAnthropic(base_url=api_url, api_key=token, max_retries=0) as claude:
        with pytest.raises(anthropic.APIStatusError) as messages:
            await claude.messages.create(
                model=profile, max_tokens=20, messages=HI, extra_headers=EMPTY
            )
    assert messages.value.status_code == 400  # the SDK surfaces' status for it
    assert messages.value.body["type"] == "error", messages.value.body  # type: ignore[index]
    assert "header.X-Project-Id" in messages.value.message, messages.value.message
    for path, body in (
        ("/gateway/invoke", {"profileId": profile, "request": {"messages": HI}}),
        ("/gateway/embed", {"profileId": profile, "inputs": ["hi"]}),
    ):
        resp = await http.post(
            path, headers=catalog.auth, json={**body, "projectId": ""}, timeout=30
        )
        assert resp.status_code == 422, (path, resp.text)
        assert resp.headers["content-type"] == "application/problem+json"
        assert [e["field"] for e in resp.json()["errors"]] == ["body.projectId"], resp.text
    assert await _receipts(sessions, tenant) == []
    assert upstream.state.stats.total == calls

    # A project named, or none (the default), is taken as before.
    async with AsyncOpenAI(base_url=f"{api_url}/v1", api_key=token, max_retries=0) as oai:
        await oai.chat.completions.create(
            model=profile, messages=HI, extra_headers={"X-Project-Id": "p1"}
        )
        await oai.chat.completions.create(model=profile, messages=HI)
    assert sorted(await _receipts(sessions, tenant)) == ["default", "p1"]
