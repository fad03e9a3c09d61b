"""Which pricing revision a call is priced at when its profile's priceBasis names none published
(the tenant's current revision: the one it published last), and the tenant policy's revision
check, which compares policies rather than the JSON a process happened to write them as."""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client

from providers.upstream import UpstreamServer
from store import pricebook
from store.routing_tables import TenantPolicyRow
from tests.conftest import TokenFactory
from tests.helpers.catalog import approved_deployment, profile_event, publish


def _book(revision: str, model: str, usd: str) -> dict[str, Any]:
    """A pricing revision of one price, in USD per million tokens."""
    entry = {
        "provider": "openai",
        "model": model,
        "inputUsdPerMtok": usd,
        "outputUsdPerMtok": usd,
        "effectiveFrom": "2026-01-01",
    }
    return {"revision": revision, "entries": [entry]}


async def _prices(
    http: httpx.AsyncClient, auth: dict[str, str], revision: str, model: str, usd: str
) -> None:
    body = _book(revision, model, usd)
    published = await http.post("/factory/pricebook-revisions", json=body, headers=auth)
    assert published.status_code == 201, published.text


async def test_a_price_basis_never_published_prices_at_the_revision_published_last(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    sessions: async_sessionmaker[AsyncSession],
    upstream: UpstreamServer,
) -> None:
    """The current revision was the tenant's only one, so there was none once it published a
    second: from then on a profile whose priceBasis names no published revision had no prices,
    its budgeted calls refused (503 without a run, 402 `no-price` on a run's pinned plan) and
    its receipts naming a revision that does not exist, with no cost, for good."""
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    model = f"prv-{uuid.uuid4().hex[:8]}"
    await _prices(http, auth, "prv-1", model, "1000")
    await approved_deployment(
        http, auth, temporal_client, tenant, "prv/a", model=model,
        endpointRef=upstream.endpoint_ref,
    )  # fmt: skip
    event = profile_event("prv", ["prv/a"], {}, priceBasis="never-published")
    assert (await publish(http, auth, event)).status_code == 200
    run = str(uuid.uuid4())
    request = {"messages": [{"role": "user", "content": "priced?"}], "max_tokens": 10}

    async def call(run_id: str | None) -> dict[str, Any]:
        body: dict[str, Any] = {"profileId": "prv", "budgetUsd": "1", "request": request}
        if run_id is not None:
            body["runId"] = run_id
        answered = await http.post("/gateway/invoke", headers=auth, json=body)
        assert answered.status_code == 200, answered.text
        return dict(answered.json()["receipt"])

    for receipt in (await call(run), await call(None)):
        assert receipt["pricingRevision"] == "prv-1", receipt
        assert Decimal(receipt["estimatedCostUsd"]) > 0, receipt

    # A second revision, published last: the current one, for the run's pinned plan and for
    # a call without a run alike.
    await _prices(http, auth, "prv-2", model, "10000")
    on_run, alone = await call(run), await call(None)
    for receipt in (on_run, alone):
        assert receipt["pricingRevision"] == "prv-2", receipt
        assert Decimal(receipt["estimatedCostUsd"]) > 0, receipt
    async with sessions() as s:
        named = await pricebook.load(s, tenant, on_run["pricingRevision"])
    assert named is not None  # the receipt names a revision that exists

    # The first revision published again, unchanged, adds nothing: it does not become current.
    again = await http.post(
        "/factory/pricebook-revisions", json=_book("prv-1", model, "1000"), headers=auth
    )
    assert again.status_code == 200, again.text
    assert (await call(None))["pricingRevision"] == "prv-2"


async def test_the_same_policy_sent_again_is_no_conflict_whatever_order_its_sets_were_stored_in(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """The stored document holds the policy's sets as lists in the order the writing process
    iterated its frozensets, which another process (another hash seed) or a restart does not
    repeat: the same policy sent again was a 409 "exists with other rules" there."""
    fresh = f"{tenant}-ord"
    auth = {"Authorization": f"Bearer {await token_for(fresh)}"}
    policy = {
        "allowedPrivacyClasses": {
            "Public": ["External", "Regional", "Confidential", "Local"],
            "Internal": ["Regional", "Confidential", "Local"],
            "Confidential": ["Confidential", "Local"],
            "Restricted": ["Local"],
        },
        "allowedRegions": ["westeurope", "northeurope", "swedencentral"],
        "allowedProviders": ["openai", "anthropic", "rerank"],
        "deniedProviders": ["cohere", "mistral"],
    }
    body = {"revision": "ord-1", "policy": policy}
    first = await http.put("/factory/tenant-policy", json=body, headers=auth)
    assert first.status_code == 200, first.text

    # As another process may have written it: every list the other way round from the body,
    # and the classifications in another order.
    def reversed_lists(value: Any) -> Any:
        if isinstance(value, list):
            return list(reversed(value))
        if isinstance(value, dict):
            return {k: reversed_lists(v) for k, v in reversed(list(value.items()))}
        return value

    async with sessions.begin() as s:
        row = await s.get(TenantPolicyRow, fresh)
        assert row is not None
        written = dict(row.document)
        row.document = reversed_lists(written)
    assert row.document != written and row.document["allowedRegions"] != written["allowedRegions"]
    again = await http.put("/factory/tenant-policy", json=body, headers=auth)
    assert again.status_code == 200, again.text
    # Other rules under the same revision are still refused.
    other = {"revision": "ord-1", "policy": {**policy, "allowedRegions": ["westeurope"]}}
    refused = await http.put("/factory/tenant-policy", json=other, headers=auth)
    assert refused.status_code == 409, refused.text
    assert refused.json()["field"] == "body.revision"
