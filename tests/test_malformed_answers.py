"""An embeddings or rerank answer the protocol does not allow is the provider's failure, never a
wrong answer passed on and never the gateway's own: a vector missing for an input, a result
naming a document that was not sent, NaN in a vector or a score, a body that is not JSON. Such
an answer is a `server_error` (transient): retried and failed over like any other, the caller
told to come back when every attempt met it, the receipt closed as the provider's failure."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from temporalio.client import Client

from providers.upstream import Fault, FaultKind, UpstreamServer
from tests.conftest import TokenFactory
from tests.helpers.catalog import profile_event, publish, record_evidence, register

EMBED, RERANK = "ma-embed", "ma-rerank"  # upstream models, and the profiles over them
DOCUMENTS = ["apple pie", "blue sky", "cherry tart"]


@pytest.fixture
async def auth(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
) -> dict[str, str]:
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    for model, provider, modality in ((EMBED, "openai", "Embedding"), (RERANK, "rerank", "Rerank")):
        dep = f"ma/{model}"
        await register(
            http, auth, dep, model=model, provider=provider, endpointRef=upstream.endpoint_ref
        )
        await record_evidence(temporal_client, tenant, dep, {"tool-calling": 0.9})
        approved = await http.post(f"/factory/model-deployments/{dep}/approve", headers=auth)
        assert approved.status_code == 200, approved.text
        event = profile_event(model, [dep], {}, modality=modality)
        assert (await publish(http, auth, event)).status_code == 200
    return auth


async def _call(http: httpx.AsyncClient, auth: dict[str, str], model: str) -> httpx.Response:
    if model == EMBED:
        body: dict[str, Any] = {"profileId": EMBED, "inputs": DOCUMENTS}
        return await http.post("/gateway/embed", headers=auth, json=body)
    body = {"profileId": RERANK, "query": "cherry pie", "documents": DOCUMENTS}
    return await http.post("/gateway/rerank", headers=auth, json=body)


def _whole(model: str, resp: httpx.Response) -> None:
    """A good answer: one finite vector per input, or results naming only documents sent."""
    assert resp.status_code == 200, resp.text
    if model == EMBED:
        vectors = resp.json()["vectors"]
        assert len(vectors) == len(DOCUMENTS) and all(len(v) > 0 for v in vectors)
    else:
        indexes = [r["index"] for r in resp.json()["results"]]
        assert sorted(indexes) == list(range(len(DOCUMENTS)))


@pytest.mark.parametrize("model", [EMBED, RERANK])
@pytest.mark.parametrize("flaw", ["missing", "not_finite", "unreadable"])
async def test_a_malformed_answer_is_the_providers_transient_failure(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    model: str,
    flaw: str,
) -> None:
    endpoint = "embeddings" if model == EMBED else "rerank"
    # Once: the gateway tries again, and the caller gets the whole answer.
    upstream.inject(model, Fault(kind=FaultKind.MALFORMED_ANSWER, flaw=flaw, times=1))
    _whole(model, await _call(http, auth, model))
    # Every time: a 503 to come back after, closed as the provider's failure.
    upstream.inject(model, Fault(kind=FaultKind.MALFORMED_ANSWER, flaw=flaw, endpoint=endpoint))
    try:
        resp = await _call(http, auth, model)
    finally:
        upstream.state.clear_faults(model)
    assert resp.status_code == 503, resp.text
    body = resp.json()
    assert body["error"]["type"] == "server_error" and body["errorClass"] == "transient", body
    assert body["closeReason"] == "provider" and int(resp.headers["Retry-After"]) >= 1
