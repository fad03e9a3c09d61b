"""One mapping of failures to status codes, the same on every surface (domain.failures): a
transient failure — refused connection, a stream cut before output, a stalled first token, a
provider 5xx — is a 503 with Retry-After (on Chat Completions, OpenAI's status for its kind: a
timeout a 504); a permanent one on the provider's side is a 502 without; the caller's own fault
is a 400. Through the real API against the local upstream."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest
from temporalio.client import Client

from domain.close_reason import CloseReason, close_reason
from domain.enums import InvocationOutcome
from domain.failures import TRANSIENT, FailureClass, classify
from providers.errors import ErrorKind
from providers.upstream import Fault, FaultKind, UpstreamServer
from tests.conftest import TokenFactory, free_port
from tests.helpers.catalog import approved_deployment, profile_event, publish

# One deployment (and profile) per failure, so no breaker opened by one is seen by another.
FAULTS: dict[str, Fault | None] = {
    "fs-dead": None,  # its endpoint is a closed port: connection refused
    "fs-cut": Fault(kind=FaultKind.STREAM_CUT, after_chunks=1),
    "fs-stall": Fault(kind=FaultKind.STREAM_STALL, after_chunks=1),
    "fs-down": Fault(kind=FaultKind.UNAVAILABLE),
    "fs-auth": Fault(kind=FaultKind.AUTH),
    "fs-policy": Fault(kind=FaultKind.CONTENT_POLICY),
}
TRANSIENT_CASES = {
    "fs-dead": "connection",
    "fs-cut": "stream_incomplete",
    "fs-stall": "timeout",
    "fs-down": "server_error",
}


@pytest.fixture
async def auth(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
) -> AsyncIterator[dict[str, str]]:
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    dead = f"upstream:127.0.0.1:{free_port()}"
    for name, fault in FAULTS.items():
        ref = dead if fault is None else upstream.endpoint_ref
        await approved_deployment(
            http, auth, temporal_client, tenant, f"fs/{name}", model=name, endpointRef=ref
        )
        assert (await publish(http, auth, profile_event(name, [f"fs/{name}"]))).status_code == 200
        if fault is not None:
            upstream.inject(name, fault)
    await approved_deployment(
        http, auth, temporal_client, tenant, "fs/dead-embed", model="fs-e", endpointRef=dead
    )
    event = profile_event(
        "fs-embed",
        ["fs/dead-embed"],
        {},
        modality="Embedding",
        embeddingCompatibility="fs-256",
    )
    assert (await publish(http, auth, event)).status_code == 200
    yield auth
    for name in FAULTS:
        upstream.state.clear_faults(name)


ROUTERS_OWN = {"unavailable", "store_unavailable", "temporal_unavailable"}


def test_the_transient_kinds_are_the_providers_and_the_routers_own() -> None:
    assert {k.value for k in ErrorKind if k.transient} | ROUTERS_OWN == TRANSIENT
    assert classify("auth") is FailureClass.PERMANENT
    assert classify("content_policy") is FailureClass.CALLER


def test_the_routers_own_refusals_never_blame_the_provider() -> None:
    for kind in sorted(ROUTERS_OWN):
        assert close_reason(InvocationOutcome.FAILED, kind) is CloseReason.UNAVAILABLE, kind


async def _chat(
    http: httpx.AsyncClient, auth: dict[str, str], surface: str, profile: str
) -> httpx.Response:
    messages = [{"role": "user", "content": "status please"}]
    key = {"Idempotency-Key": f"fs-{uuid.uuid4().hex}"}
    if surface == "gateway":
        body: dict[str, Any] = {"profileId": profile, "request": {"messages": messages}}
        return await http.post("/gateway/invoke", headers=auth, json=body)
    body = {"model": profile, "messages": messages, "stream": surface == "openai-stream"}
    return await http.post("/v1/chat/completions", headers={**auth, **key}, json=body)


@pytest.mark.parametrize("surface", ["openai", "openai-stream", "gateway"])
async def test_every_transient_failure_is_retryable_with_retry_after_on_every_surface(
    http: httpx.AsyncClient, auth: dict[str, str], surface: str
) -> None:
    for profile, kind in TRANSIENT_CASES.items():
        resp = await _chat(http, auth, surface, profile)
        # Chat Completions answers as OpenAI does (api/openai_errors.FAILURES): a timeout the
        # gateway's 504, every other kind a 503 `server_error`, the kind as the code.
        status, named = 503, kind
        if surface != "gateway":
            status, named = (504 if kind == "timeout" else 503), "server_error"
        assert resp.status_code == status, (profile, resp.status_code, resp.text)
        assert int(resp.headers["Retry-After"]) >= 1, profile
        body = resp.json()
        assert body["errorClass"] == "transient" and body["error"]["type"] == named, body
        assert body["error"]["code"] == kind and body["status"] == status, body
        assert resp.headers["content-type"].startswith("application/problem+json")

    permanent = await _chat(http, auth, surface, "fs-auth")
    assert permanent.status_code == 502 and "Retry-After" not in permanent.headers
    assert permanent.json()["errorClass"] == "permanent"
    refused = await _chat(http, auth, surface, "fs-policy")
    assert refused.status_code == 400 and "Retry-After" not in refused.headers


async def test_embeddings_map_a_transient_failure_the_same_way(
    http: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    openai_surface = await http.post(
        "/v1/embeddings", headers=auth, json={"model": "fs-embed", "input": "vectors please"}
    )
    gateway = await http.post(
        "/gateway/embed", headers=auth, json={"profileId": "fs-embed", "inputs": ["vectors"]}
    )
    for resp in (openai_surface, gateway):
        assert resp.status_code == 503, resp.text
        assert int(resp.headers["Retry-After"]) >= 1
        assert resp.json()["errorClass"] == "transient"


async def test_a_replayed_transient_failure_tells_the_caller_to_use_a_new_key(
    api_url: str, auth: dict[str, str], upstream: UpstreamServer
) -> None:
    # The key's answer is the key's for good: a Retry-After on its replay sent a runtime that
    # keys each step stably back to the same failure, however long it waited, and the SDKs
    # retry a 503 by default. The first answer keeps its advice.
    sent: list[str] = []

    async def count(request: httpx.Request) -> None:
        sent.append(request.url.path)

    key = {"Idempotency-Key": f"fs-{uuid.uuid4().hex}"}
    messages: Any = [{"role": "user", "content": "status please"}]
    async with openai.DefaultAsyncHttpxClient(event_hooks={"request": [count]}) as transport:
        sdk = openai.AsyncOpenAI(
            base_url=f"{api_url}/v1",
            api_key=auth["Authorization"].removeprefix("Bearer "),
            max_retries=2,
            http_client=transport,
        )
        with pytest.raises(openai.InternalServerError) as first:
            await sdk.with_options(max_retries=0).chat.completions.create(
                model="fs-stall", messages=messages, extra_headers=key
            )
        assert int(first.value.response.headers["Retry-After"]) >= 1
        calls = upstream.requests("fs-stall")
        with pytest.raises(openai.InternalServerError) as again:
            await sdk.chat.completions.create(
                model="fs-stall", messages=messages, extra_headers=key
            )
    replayed = again.value.response
    # Replayed, the failure is told by its close reason (a timeout: still transient, a 504).
    assert replayed.json()["closeReason"] == "timeout" and replayed.status_code == 504
    assert "Retry-After" not in replayed.headers
    assert replayed.headers["x-should-retry"] == "false"
    assert replayed.json()["receiptId"] == first.value.response.json()["receiptId"]
    assert "new key" in replayed.json()["detail"]
    # Told not to, the SDK did not retry (it would have twice); nor did the gateway call again.
    assert len(sent) == 2 and upstream.requests("fs-stall") == calls


@pytest.mark.parametrize("surface", ["openai-stream", "gateway-stream"])
async def test_a_streamed_replay_of_a_failure_before_output_is_that_failure(
    http: httpx.AsyncClient, auth: dict[str, str], surface: str
) -> None:
    """A streamed call that failed before any output was answered a 503; its key sent again
    with stream was a 200 stream ending in an error event, which an SDK retrying on the
    status never saw as the failure it was."""
    key = {"Idempotency-Key": f"fs-{uuid.uuid4().hex}"}
    messages: Any = [{"role": "user", "content": "status please"}]
    if surface == "gateway-stream":
        url = "/gateway/invoke"
        body: dict[str, Any] = {"profileId": "fs-stall", "request": {"messages": messages}}
        body["stream"] = True
    else:
        url, body = "/v1/chat/completions", {"model": "fs-stall", "messages": messages}
        body["stream"] = True
    # A timeout: the gateway's 503, Chat Completions' 504 (api/openai_errors.FAILURES).
    status = 503 if surface == "gateway-stream" else 504
    first = await http.post(url, headers={**auth, **key}, json=body)
    assert first.status_code == status, first.text
    again = await http.post(url, headers={**auth, **key}, json=body)
    assert again.status_code == status, again.text
    assert again.headers["content-type"].startswith("application/problem+json")
    assert again.headers["x-should-retry"] == "false"
    assert again.json()["closeReason"] == "timeout"
