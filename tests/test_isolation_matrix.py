"""Tenant isolation across every endpoint that takes an object id or lists objects: tenant B,
with every role and scope, gets 404 on tenant A's objects (never 403, which would confirm they
exist) and sees none of them in lists. Tenant A reading the same URLs shows each probe can see
the object, so a 404 means isolation and not a typo."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client

from core.security import new_client_secret
from domain.enums import Role, Scope
from providers.upstream import UpstreamServer
from store.clients import upsert_client
from tests.helpers.catalog import profile_event, publish, record_evidence, register
from tests.helpers.deadline import eventually
from tests.test_pricebook import revision


@dataclass
class World:
    http: httpx.AsyncClient
    a: dict[str, str]
    b: dict[str, str]
    ids: dict[str, str]


async def _token(api_url: str, sessions: async_sessionmaker[AsyncSession], tenant: str) -> str:
    client_id, secret = f"iso-{uuid.uuid4().hex[:10]}", new_client_secret()
    await upsert_client(
        sessions,
        tenant_id=tenant,
        client_id=client_id,
        secret=secret,
        roles=[Role.PLATFORM_ADMIN],
        scopes=list(Scope),
    )
    async with httpx.AsyncClient(base_url=api_url) as c:
        resp = await c.post(
            "/oauth/token", data={"grant_type": "client_credentials"}, auth=(client_id, secret)
        )
    resp.raise_for_status()
    return str(resp.json()["access_token"])


@pytest.fixture(scope="module")
async def world(
    api_url: str, sessions: async_sessionmaker[AsyncSession], temporal_client: Client
) -> AsyncIterator[World]:
    tag = uuid.uuid4().hex[:8]
    tenant_a, tenant_b = f"iso-a-{tag}", f"iso-b-{tag}"
    a = {"Authorization": f"Bearer {await _token(api_url, sessions, tenant_a)}"}
    b = {"Authorization": f"Bearer {await _token(api_url, sessions, tenant_b)}"}
    ids = {
        "deployment": f"sim/iso-{tag}",
        "profile": f"iso-{tag}",
        "run": str(uuid.uuid4()),
        "key": f"iso-key-{tag}",
        "revision": f"iso-rev-{tag}",
    }
    async with (
        UpstreamServer() as upstream,
        httpx.AsyncClient(base_url=api_url, timeout=30) as http,
    ):
        await register(
            http, a, ids["deployment"], model="iso-sim", endpointRef=upstream.endpoint_ref
        )
        await record_evidence(temporal_client, tenant_a, ids["deployment"], {"tool-calling": 0.9})
        approve = await http.post(
            f"/factory/model-deployments/{ids['deployment']}/approve", headers=a
        )
        assert approve.status_code == 200, approve.text
        published = await publish(http, a, profile_event(ids["profile"], [ids["deployment"]]))
        assert published.status_code == 200, published.text
        priced = await http.post(
            "/factory/pricebook-revisions", json=revision(ids["revision"]), headers=a
        )
        assert priced.status_code == 201, priced.text
        hook = await http.post(
            "/factory/webhook-subscriptions",
            json={"url": f"http://127.0.0.1:9/{tag}"},
            headers=a,
        )
        assert hook.status_code == 201, hook.text
        ids["subscription"] = str(hook.json()["subscriptionId"])
        statement = await http.post(
            "/factory/usage-statements",
            content=(
                "provider,bucketStart,bucketWidth,model,key,inputTokens,outputTokens\n"
                f"vllm,2026-11-30T10:00:00Z,1h,iso-{tag},pool:iso,10,2\n"
            ),
            headers={**a, "Content-Type": "text/csv"},
        )
        assert statement.status_code == 201, statement.text
        ids["import"] = str(statement.json()["importId"])
        chat = await http.post(
            "/v1/chat/completions",
            json={"model": ids["profile"], "messages": [{"role": "user", "content": "hi"}]},
            headers={**a, "X-Run-Id": ids["run"], "Idempotency-Key": ids["key"]},
        )
        assert chat.status_code == 200, chat.text
        ids["receipt"] = chat.headers["x-model-router-receipt-id"]

        async def events_readable() -> bool:  # about a second after: store/outbox_horizon.py
            feed = await http.get("/factory/events?limit=500", headers=a)
            return ids["receipt"] in feed.text

        # So that B's reads of the feed are asked when A's events are there to leak.
        await eventually(events_readable, timeout=10, interval=0.1)
        yield World(http, a, b, ids)
        await http.delete(f"/factory/webhook-subscriptions/{ids['subscription']}", headers=a)


# (method, path template, body or None): tenant B must get 404. Reads also run as tenant A.
OBJECT_CASES: list[tuple[str, str, dict[str, Any] | None]] = [
    ("GET", "/factory/model-profiles/{profile}", None),
    ("GET", "/factory/model-profiles/{profile}?version=1", None),
    ("POST", "/factory/model-profiles/{profile}/route-plan/preview", {}),
    ("GET", "/factory/model-deployments/{deployment}", None),
    ("PUT", "/factory/model-deployments/{deployment}/license", {"commercialUse": True}),
    ("POST", "/factory/model-deployments/{deployment}/approve", None),
    ("POST", "/factory/model-deployments/{deployment}/evaluate", None),
    ("POST", "/factory/model-deployments/{deployment}/retire", None),
    ("GET", "/factory/pricebook-revisions/{revision}", None),
    ("DELETE", "/factory/webhook-subscriptions/{subscription}", None),
    ("GET", "/factory/usage-statements/{import}", None),
    ("POST", "/gateway/route-plans", {"profileId": "{profile}", "runId": "{run}"}),
    (
        "POST",
        "/v1/chat/completions",
        {"model": "{profile}", "messages": [{"role": "user", "content": "hi"}]},
    ),
]
LIST_CASES = [
    "/factory/model-profiles",
    "/factory/model-deployments",
    "/factory/pricebook-revisions",
    "/factory/webhook-subscriptions",
    "/factory/usage-statements",
    "/factory/events?limit=500",
    "/factory/runs/{run}/model-receipts",
    "/v1/models",
]


def _fill(value: Any, ids: dict[str, str]) -> Any:
    if isinstance(value, str):
        return value.format(**ids)
    if isinstance(value, dict):
        return {k: _fill(v, ids) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, ids) for v in value]
    return value


@pytest.mark.parametrize(
    ("kind", "method", "path", "body"),
    [("object", *case) for case in OBJECT_CASES] + [("list", "GET", p, None) for p in LIST_CASES],
    ids=[f"{m} {p}" for m, p, _ in OBJECT_CASES] + [f"list {p}" for p in LIST_CASES],
)
async def test_tenant_b_cannot_see_tenant_a(
    world: World, kind: str, method: str, path: str, body: dict[str, Any] | None
) -> None:
    url = _fill(path, world.ids)
    extra = {"Idempotency-Key": world.ids["key"]}  # A's key: B must not get A's replay either
    resp = await world.http.request(
        method, url, json=_fill(body, world.ids), headers={**world.b, **extra}
    )
    secrets_of_a = [world.ids[k] for k in ("deployment", "profile", "subscription", "import")]
    secrets_of_a += [world.ids["receipt"], world.ids["revision"]]
    if kind == "object":
        assert resp.status_code == 404, resp.text
    else:
        assert resp.status_code == 200, resp.text
    # A 404 may repeat the id B asked for; nothing else of A's may appear.
    asked = url + json.dumps(_fill(body, world.ids))
    assert not any(s in resp.text for s in secrets_of_a if s not in asked), resp.text

    if method == "GET":
        # The same URL as tenant A does find the object: the probe is aimed right.
        mine = await world.http.get(url, headers=world.a)
        assert mine.status_code == 200, mine.text
        assert any(s in mine.text for s in secrets_of_a), mine.text
