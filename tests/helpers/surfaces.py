"""A catalog for the agent-native surfaces' tests: one profile on an OpenAI-protocol
deployment and one on an Anthropic-protocol deployment of the local upstream, with models
unique to the test so request counts and faults never leak between tests."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client

from providers.upstream import UpstreamServer
from store.receipts import by_key
from store.tables import InvocationReceiptRow
from tests.helpers.catalog import profile_event, publish, record_evidence, register

CAPABILITIES = {
    "tool-calling": 0.95,
    "parallel-tool-calling": 0.9,
    "json-schema": 0.95,
    "strict-json": 0.95,
}
PROTOCOLS = ("openai", "anthropic")


@dataclass
class Catalog:
    auth: dict[str, str]
    tag: str
    tenant: str

    def profile(self, protocol: str) -> str:
        return f"{protocol}-{self.tag}"

    def model(self, protocol: str) -> str:
        return f"{protocol}-model-{self.tag}"

    def deployment(self, protocol: str) -> str:
        return f"sf/{protocol}-{self.tag}"


async def build_catalog(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    temporal: Client,
    tenant: str,
    upstream: UpstreamServer,
    **profile: Any,
) -> Catalog:
    """The catalog; `profile` sets fields of both profiles (e.g. maxOutputTokens)."""
    catalog = Catalog(auth=auth, tag=uuid.uuid4().hex[:8], tenant=tenant)
    # Priced, so that a budget (X-Budget-Usd) can be judged on these surfaces too.
    prices = {
        "revision": f"sf-{catalog.tag}",
        "entries": [
            {
                "provider": protocol,
                "model": catalog.model(protocol),
                "inputUsdPerMtok": "1000",
                "outputUsdPerMtok": "2000",
                "effectiveFrom": "2020-01-01",
            }
            for protocol in PROTOCOLS
        ],
    }
    priced = await http.post("/factory/pricebook-revisions", json=prices, headers=auth)
    assert priced.status_code == 201, priced.text

    async def one(protocol: str) -> None:
        deployment = catalog.deployment(protocol)
        # Its evidence once, the catalog's (approved_deployment records another first).
        await register(
            http,
            auth,
            deployment,
            provider=protocol,
            model=catalog.model(protocol),
            endpointRef=upstream.endpoint_ref,
        )
        await record_evidence(temporal, tenant, deployment, CAPABILITIES)
        approved = await http.post(f"/factory/model-deployments/{deployment}/approve", headers=auth)
        assert approved.status_code == 200, approved.text
        event = profile_event(
            catalog.profile(protocol),
            [deployment],
            {"tool-calling": 0.8},
            priceBasis=f"sf-{catalog.tag}",
            **profile,
        )
        published = await publish(http, auth, event)
        assert published.status_code == 200, published.text

    # The two protocols' deployments side by side: 0.45 -> 0.29 s a build on an idle machine
    # (0.9 s before under the suite's processes), which about 300 tests each build. A task
    # group: one failing stops the other from calling on after the fixture failed.
    async with asyncio.TaskGroup() as group:
        for protocol in PROTOCOLS:
            group.create_task(one(protocol))
    return catalog


async def receipt(
    sessions: async_sessionmaker[AsyncSession], tenant: str, key: str
) -> InvocationReceiptRow:
    async with sessions() as session:
        row = await by_key(session, tenant, key)
    assert row is not None, key
    return row
