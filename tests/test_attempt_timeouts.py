"""Per-attempt bounds the adapter enforces, configured per profile and per deployment: the
response's first byte (a provider that accepts and stays silent), and connecting (a host whose
accept queue is full, so the handshake never completes). The test settings leave first token
and stream idle at 2 s, so each bound shows by ending the call well before those would."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest
from temporalio.client import Client

from providers.upstream import Fault, FaultKind, UpstreamServer
from tests.conftest import TokenFactory
from tests.helpers.catalog import approved_profile

MODEL = "at-sim"


@pytest.fixture
def blackhole() -> Iterator[int]:
    """A port that accepts one connection and leaves every later handshake unanswered."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    held = socket.create_connection(("127.0.0.1", port))
    try:
        yield port
    finally:
        held.close()
        server.close()


@pytest.fixture
async def auth(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
    blackhole: int,
) -> dict[str, str]:
    upstream.state.clear_faults(MODEL)
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    sim = {"model": MODEL, "endpointRef": upstream.endpoint_ref}
    hole = {"model": MODEL, "endpointRef": f"upstream:127.0.0.1:{blackhole}"}
    for profile, deployment, fields in (
        ("tight-first-byte", "at/sim", sim),
        ("hole-tight", "at/hole", hole),
        ("hole-default", "at/hole-default", hole),
    ):
        await approved_profile(http, auth, temporal_client, tenant, profile, {deployment: fields})
    return auth


async def _call(
    http: httpx.AsyncClient, auth: dict[str, str], profile: str
) -> tuple[httpx.Response, float]:
    began = time.monotonic()
    resp = await http.post(
        "/v1/chat/completions",
        headers={**auth, "Idempotency-Key": uuid.uuid4().hex},
        json={"model": profile, "stream": True, "messages": [{"role": "user", "content": "hi"}]},
    )
    return resp, time.monotonic() - began


async def test_a_silent_provider_fails_at_the_profiles_first_byte_bound(
    http: httpx.AsyncClient, auth: dict[str, str], upstream: UpstreamServer
) -> None:
    upstream.inject(MODEL, Fault(kind=FaultKind.HANG))
    before = upstream.requests(MODEL)
    resp, took = await _call(http, auth, "tight-first-byte")
    # 0.5 s for the headers, not the 2 s first-token bound (the reason names which bound ended
    # it); never retried after a timeout.
    # A timeout: 504 on Chat Completions (api/openai_errors.FAILURES).
    assert resp.status_code == 504 and took >= 0.5, (resp.status_code, took)
    assert "first byte timeout" in resp.text, resp.text
    assert upstream.requests(MODEL) - before == 1


async def test_the_first_byte_bound_does_not_cut_a_slow_first_token(
    http: httpx.AsyncClient, auth: dict[str, str], upstream: UpstreamServer
) -> None:
    # Headers come at once and the first token after 1 s: past the 0.5 s first-byte bound,
    # within the 2 s first-token bound, so the answer is whole.
    upstream.inject(MODEL, Fault(kind=FaultKind.SLOW_FIRST_TOKEN, delay=1.0, times=1))
    resp, took = await _call(http, auth, "tight-first-byte")
    assert resp.status_code == 200 and took >= 1.0
    assert resp.text.rstrip().endswith("data: [DONE]")


async def test_connecting_is_bounded_per_deployment(
    http: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    # The deployment's 0.5 s connect bound ends it: the client's own timeout ("timed out"),
    # ahead of the attempt's first-token bound (2 s here).
    resp, took = await _call(http, auth, "hole-tight")
    assert resp.status_code in (502, 504) and took >= 0.5, (resp.status_code, took)
    assert resp.json()["reason"] == "timed out", resp.text
    # The same unreachable host without the deployment's override waits for the default
    # bounds (connect 5 s, first token 2 s here): the override is what made it quick.
    resp, took = await _call(http, auth, "hole-default")
    assert resp.status_code in (502, 504) and took >= 1.9, (resp.status_code, took)
    assert resp.json()["reason"] == "first token timeout", resp.text
