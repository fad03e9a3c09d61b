"""A key's request is its data classification as well as its body: the classification decides
which deployments the tenant's policy lets see the call. Hashed without it, a key used as
Internal and sent again as Confidential (which the baseline policy keeps from the catalog's
Regional deployments) replayed the Internal answer, a 200, the caller's classification silently
ignored. Now that is a 409 `idempotency-key-reused` naming the key; the same classification
again still replays, and an explicit Internal is the same request as none (so every key used
before, nearly all sent without one, replays across the upgrade)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest

from providers.upstream import UpstreamServer
from tests.conftest import TokenFactory
from tests.helpers.surfaces import Catalog

RECEIPT = "X-Model-Router-Receipt-Id"


@pytest.fixture
async def sdk(api_url: str, token_for: TokenFactory, tenant: str) -> AsyncIterator[Any]:
    # Retries allowed: a 409 is sent again by the SDK unless it says x-should-retry: false.
    async with openai.AsyncOpenAI(
        base_url=f"{api_url}/v1", api_key=await token_for(tenant), max_retries=2
    ) as client:
        yield client


async def _call(sdk: Any, catalog: Catalog, key: str, classification: str | None) -> str:
    """The call's receipt id, answered 200."""
    headers = {"Idempotency-Key": key}
    if classification is not None:
        headers["X-Data-Classification"] = classification
    raw = await sdk.chat.completions.with_raw_response.create(
        model=catalog.profile("openai"),
        messages=[{"role": "user", "content": "classified"}],
        extra_headers=headers,
    )
    assert raw.http_response.status_code == 200
    return str(raw.headers[RECEIPT])


async def _refused(sdk: Any, catalog: Catalog, key: str, classification: str) -> None:
    with pytest.raises(openai.ConflictError) as conflict:
        await _call(sdk, catalog, key, classification)
    # The SDK's `body` is the error member it reads; the problem is the whole response.
    error: Any = conflict.value.body
    assert error["param"] == "header.Idempotency-Key", error
    problem = conflict.value.response.json()
    assert problem["type"].endswith("/idempotency-key-reused"), problem
    assert problem["field"] == "header.Idempotency-Key", problem
    assert conflict.value.response.headers["x-should-retry"] == "false"


@pytest.mark.parametrize("first", [None, "Internal"])
async def test_a_key_sent_again_with_another_classification_is_refused_not_replayed(
    sdk: Any, catalog: Catalog, upstream: UpstreamServer, first: str | None
) -> None:
    model, key = catalog.model("openai"), f"dc-{uuid.uuid4().hex}"
    before = upstream.requests(model)
    receipt = await _call(sdk, catalog, key, first)
    # Confidential data may not go to the catalog's Regional deployment: it was replayed the
    # Internal answer, a 200.
    await _refused(sdk, catalog, key, "Confidential")
    # The same classification again, given or not, replays: no new call.
    assert await _call(sdk, catalog, key, first) == receipt
    assert await _call(sdk, catalog, key, "Internal" if first is None else None) == receipt
    assert upstream.requests(model) - before == 1


async def test_a_key_used_with_a_classification_replays_only_with_it(
    sdk: Any, catalog: Catalog, upstream: UpstreamServer
) -> None:
    # Public data may go anywhere: the call is made; sent again without the header (Internal),
    # it is another request.
    model, key = catalog.model("openai"), f"dc-{uuid.uuid4().hex}"
    before = upstream.requests(model)
    receipt = await _call(sdk, catalog, key, "Public")
    assert await _call(sdk, catalog, key, "Public") == receipt
    await _refused(sdk, catalog, key, "Internal")
    with pytest.raises(openai.ConflictError):
        await _call(sdk, catalog, key, None)
    assert upstream.requests(model) - before == 1


async def test_the_gateway_takes_the_classification_from_its_header_too(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    catalog: Catalog,
    upstream: UpstreamServer,
) -> None:
    """`/gateway/*` read the body's `dataClassification` alone: a runtime sending the header it
    sends to every surface had its Confidential call routed as Internal, to a deployment the
    policy keeps from Confidential data. The header counts as the body does; both, and
    different, is a 422."""
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    model = catalog.model("openai")
    before = upstream.requests(model)

    def body(**more: Any) -> dict[str, Any]:
        chat = {"messages": [{"role": "user", "content": "classified"}], "max_tokens": 20}
        return {"profileId": catalog.profile("openai"), "request": chat, **more}

    confidential = {**auth, "X-Data-Classification": "Confidential"}
    refused = await http.post("/gateway/invoke", json=body(), headers=confidential)
    assert refused.status_code == 403, refused.text
    assert refused.json()["type"].endswith("/policy-denied")
    both = await http.post(
        "/gateway/invoke", json=body(dataClassification="Internal"), headers=confidential
    )
    assert both.status_code == 422, both.text
    assert both.json()["errors"][0]["field"] == "header.X-Data-Classification"
    assert upstream.requests(model) == before  # neither reached the provider
    # Agreeing, or the header alone as Internal, is served.
    for headers, more in (
        (confidential, {"dataClassification": "Confidential"}),
        ({**auth, "X-Data-Classification": "Internal"}, {}),
    ):
        answered = await http.post("/gateway/invoke", json=body(**more), headers=headers)
        expected = 403 if more else 200
        assert answered.status_code == expected, answered.text


async def test_a_route_plan_takes_the_classification_from_its_header_too(
    http: httpx.AsyncClient, token_for: TokenFactory, tenant: str, catalog: Catalog
) -> None:
    """ResolveRoutePlan read the body alone: a runtime sending the header on both calls had its
    run planned as Internal while its Invoke said Confidential (refused as planned for other
    data, or served from a plan resolved for the wrong data)."""
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}

    def body(**more: Any) -> dict[str, Any]:
        return {"runId": str(uuid.uuid4()), "profileId": catalog.profile("openai"), **more}

    confidential = {**auth, "X-Data-Classification": "Confidential"}
    refused = await http.post("/gateway/route-plans", json=body(), headers=confidential)
    assert refused.status_code == 403, refused.text
    assert refused.json()["type"].endswith("/policy-denied")
    both = await http.post(
        "/gateway/route-plans", json=body(dataClassification="Internal"), headers=confidential
    )
    assert both.status_code == 422, both.text
    assert both.json()["errors"][0]["field"] == "header.X-Data-Classification"
    internal = {**auth, "X-Data-Classification": "Internal"}
    planned = await http.post("/gateway/route-plans", json=body(), headers=internal)
    assert planned.status_code == 201, planned.text
