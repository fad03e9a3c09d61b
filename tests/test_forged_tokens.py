"""Rate limits cannot be turned against another client: a token whose signature does not verify
names nobody, so its requests count against the caller's address, never against the client its
claims name — and changing the claims does not get round the address's limit."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import AsyncIterator

import httpx
import jwt
import pytest

from core.settings import Settings
from tests.conftest import TokenFactory
from tests.helpers.stack import Served, serve

BURST = 5


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _forged(claims: dict[str, object]) -> str:
    header = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    return f"{header}.{_b64(json.dumps(claims).encode())}.{_b64(b'not-a-signature')}"


@pytest.fixture
async def limited(settings: Settings) -> AsyncIterator[Served]:
    """A gateway whose buckets hold BURST requests and barely refill."""
    own = settings.model_copy(
        update={
            "rate_limit_burst": BURST,
            "rate_limit_per_second": 0.01,
            "temporal_invocation_task_queue": f"limits-{uuid.uuid4().hex[:8]}",
        }
    )
    async with serve(own) as api:
        yield api


async def test_forged_tokens_cannot_drain_a_real_clients_bucket(
    limited: Served, token_for: TokenFactory, tenant: str
) -> None:
    real = await token_for(tenant)
    claims = jwt.decode(real, options={"verify_signature": False})
    async with httpx.AsyncClient(base_url=limited.url, timeout=30) as http:
        forged = [
            await http.get(
                "/factory/model-profiles",
                headers={"Authorization": f"Bearer {_forged(claims)}"},
            )
            for _ in range(3 * BURST)
        ]
        # Each is refused as unauthenticated until the address's own bucket runs dry.
        assert {r.status_code for r in forged} == {401, 429}
        assert [r.status_code for r in forged[:BURST]] == [401] * BURST
        # The client they named still has its whole bucket.
        served = [
            await http.get("/factory/model-profiles", headers={"Authorization": f"Bearer {real}"})
            for _ in range(BURST)
        ]
        assert [r.status_code for r in served] == [200] * BURST


async def test_changing_the_forged_claims_does_not_escape_the_address_limit(
    limited: Served, token_for: TokenFactory, tenant: str
) -> None:
    claims = jwt.decode(await token_for(tenant), options={"verify_signature": False})
    async with httpx.AsyncClient(base_url=limited.url, timeout=30) as http:
        answers = [
            await http.get(
                "/factory/model-profiles",
                headers={"Authorization": f"Bearer {_forged({**claims, 'sub': f'c-{i}'})}"},
            )
            for i in range(2 * BURST)
        ]
    codes = [r.status_code for r in answers]
    assert codes[:BURST] == [401] * BURST and set(codes[BURST:]) == {429}
    assert all(int(r.headers["retry-after"]) >= 1 for r in answers[BURST:])
