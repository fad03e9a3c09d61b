"""The receipt keeps the provider's request id whenever the provider sent one: a stream that
stalls or carries a malformed chunk, before or after output, through both wire protocols — so
the reconciler can match the receipt exactly. Through the real API against the local upstream."""

from __future__ import annotations

import uuid

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client

from providers.upstream import Fault, FaultKind, UpstreamServer
from tests.conftest import TokenFactory
from tests.helpers.catalog import approved_deployment, profile_event, publish
from tests.helpers.surfaces import receipt as _receipt

MODELS = {"openai": "rid-openai", "anthropic": "rid-anthropic"}
# SSE events before the first words: OpenAI's role chunk; Anthropic's message_start, block
# start and ping. One more carries "Echo:", the first output.
BEFORE_OUTPUT = {"openai": 1, "anthropic": 3}


@pytest.fixture
async def auth(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
) -> dict[str, str]:
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    for provider, model in MODELS.items():
        upstream.state.clear_faults(model)
        await approved_deployment(
            http,
            auth,
            temporal_client,
            tenant,
            f"rid/{provider}",
            provider=provider,
            model=model,
            endpointRef=upstream.endpoint_ref,
        )
        event = profile_event(f"rid-{provider}", [f"rid/{provider}"])
        assert (await publish(http, auth, event)).status_code == 200
    return auth


async def _stream(
    http: httpx.AsyncClient, auth: dict[str, str], profile: str
) -> tuple[httpx.Response, str]:
    key = f"rid-{uuid.uuid4().hex}"
    resp = await http.post(
        "/v1/chat/completions",
        headers={**auth, "Idempotency-Key": key},
        json={"model": profile, "stream": True, "messages": [{"role": "user", "content": "hi"}]},
    )
    return resp, key


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize(
    ("fault", "output", "outcome", "kind"),
    [
        (FaultKind.STREAM_STALL, True, "Partial", "timeout"),
        (FaultKind.STREAM_STALL, False, "Failed", "timeout"),
        (FaultKind.MALFORMED_CHUNK, True, "Partial", "stream_incomplete"),
        (FaultKind.MALFORMED_CHUNK, False, "Failed", "stream_incomplete"),
    ],
    ids=["stall-after-output", "stall-before-output", "garbled-after-output", "garbled-before"],
)
async def test_a_broken_stream_keeps_the_providers_request_id(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    provider: str,
    fault: FaultKind,
    output: bool,
    outcome: str,
    kind: str,
) -> None:
    model = MODELS[provider]
    after = BEFORE_OUTPUT[provider] + (1 if output else 0)
    upstream.inject(model, Fault(kind=fault, after_chunks=after))
    seen = len(upstream.state.ledger)
    try:
        resp, key = await _stream(http, auth, f"rid-{provider}")
    finally:
        upstream.state.clear_faults(model)
    row = await _receipt(sessions, tenant, key)
    assert row.outcome == outcome, resp.text
    if output:
        # The error event names the kind as the whole answer's error does: as its code.
        assert resp.status_code == 200 and f'"code":"{kind}"' in resp.text
    else:
        # Chat Completions answers a timeout as a 504 (api/openai_errors.FAILURES).
        status = 504 if kind == "timeout" else 503
        assert resp.status_code == status and resp.json()["error"]["code"] == kind
    # The id the provider sent for the attempt the receipt is about (the last one, when a
    # garbled stream before output was retried).
    sent = [r.request_id for r in list(upstream.state.ledger)[seen:] if r.model == model]
    assert sent and row.provider_request_id == sent[-1]
