"""schemathesis over the OpenAPI of every endpoint, with a valid token: no 5xx, and every
response matches the schema the API publishes.

Runs over real HTTP against the session's uvicorn server. Schemathesis (and Hypothesis) are
synchronous, so they run in a thread while the event loop keeps serving the API. Each operation
gets EXAMPLES generated cases (positive and negative), derandomised so a run is repeatable.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import hypothesis
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase
from schemathesis.checks import not_a_server_error, response_schema_conformance
from schemathesis.core.result import Err
from temporalio.client import Client

from providers.upstream import UpstreamServer
from tests.conftest import TokenFactory
from tests.helpers.catalog import profile_event, publish, record_evidence, register

EXAMPLES = 20
# A subscription's delivery workflow would POST events to whatever host was generated.
EXCLUDED = {"POST /factory/webhook-subscriptions"}
# Generated profile ids never name a real profile, so the invoke surfaces would only ever
# answer 404: aim the bodies that name a profile at a catalog on the local upstream instead.
PROFILE_FIELD = {
    "POST /v1/chat/completions": ("model", "st"),
    "POST /v1/embeddings": ("model", "st-embed"),
    "POST /v1/messages": ("model", "st"),
    "POST /v1/messages/count_tokens": ("model", "st"),
    "POST /v1/responses": ("model", "st"),
    "POST /gateway/route-plans": ("profileId", "st"),
    "POST /gateway/invoke": ("profileId", "st"),
    "POST /gateway/embed": ("profileId", "st-embed"),
    "POST /gateway/rerank": ("profileId", "st-rerank"),
}


@dataclass
class Outcome:
    operations: list[str] = field(default_factory=list)
    calls: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    by_operation: dict[str, dict[int, int]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    gateway_5xx: list[str] = field(default_factory=list)


def _is_gateway_verdict(response: schemathesis.Response) -> bool:
    # Messages answers a failed call with Anthropic's status for its kind (500, 529 among them).
    if response.status_code not in (500, 502, 503, 504, 529):
        return False
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and "errorClass" in body


def _run(base_url: str, token: str) -> Outcome:
    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.json")
    outcome = Outcome()
    headers = {"Authorization": f"Bearer {token}"}
    for result in schema.get_all_operations():
        if isinstance(result, Err):
            outcome.failures.append(f"the schema has an invalid operation: {result.err()}")
            continue
        operation = result.ok()
        if operation.label in EXCLUDED:
            continue
        outcome.operations.append(operation.label)

        @hypothesis.given(case=operation.as_strategy())
        @hypothesis.settings(
            max_examples=EXAMPLES,
            deadline=None,
            derandomize=True,
            database=None,
            phases=[Phase.explicit, Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        def check(case: schemathesis.Case) -> None:
            aim = PROFILE_FIELD.get(case.operation.label)
            if aim and isinstance(case.body, dict) and aim[0] in case.body:
                case.body[aim[0]] = aim[1]
                # Confidential or Restricted data (the baseline policy keeps it off Regional
                # deployments) and any budget (the catalog has no prices) exclude every
                # candidate: a 403 denial or a 503, not the happy path this aims at.
                if "dataClassification" in case.body:
                    case.body["dataClassification"] = "Internal"
                case.body.pop("budgetUsd", None)
                generated: Any = case.headers or {}
                for header in ("X-Data-Classification", "X-Budget-Usd"):
                    generated.pop(header, None)
            response = case.call(base_url=base_url, headers=headers, timeout=30)
            status = response.status_code
            if status >= 500 and aim and _is_gateway_verdict(response):
                # The provider (or the routing) failed the call and the gateway says so with its
                # error class and receipt: a verdict on the upstream, counted and reported.
                outcome.gateway_5xx.append(f"{status} {case.operation.label}: {response.text}")
                not_server_error: list[Any] = []
            else:
                not_server_error = [not_a_server_error]
            case.validate_response(
                response, checks=[*not_server_error, response_schema_conformance]
            )
            outcome.calls += 1
            outcome.statuses[response.status_code] = (
                outcome.statuses.get(response.status_code, 0) + 1
            )
            mine = outcome.by_operation.setdefault(case.operation.label, {})
            mine[response.status_code] = mine.get(response.status_code, 0) + 1

        try:
            check()
        # schemathesis's FailureGroup is a BaseExceptionGroup; every operation still runs and the
        # failures are reported together.
        except (Exception, BaseExceptionGroup) as exc:
            outcome.failures.append(f"{operation.label}: {exc}")
    return outcome


@pytest.fixture(scope="module")
async def upstream() -> AsyncIterator[UpstreamServer]:
    async with UpstreamServer() as server:
        yield server


async def _catalog(
    http: httpx.AsyncClient, auth: dict[str, str], tenant: str, temporal: Client, ref: str
) -> None:
    for dep, provider, profile, modality in (
        ("st/chat", "openai", "st", "Chat"),
        ("st/embed", "openai", "st-embed", "Embedding"),
        ("st/rerank", "rerank", "st-rerank", "Rerank"),
    ):
        await register(http, auth, dep, model=dep, provider=provider, endpointRef=ref)
        await record_evidence(temporal, tenant, dep, {"tool-calling": 0.9})
        approve = await http.post(f"/factory/model-deployments/{dep}/approve", headers=auth)
        assert approve.status_code == 200, approve.text
        event = profile_event(profile, [dep], {}, modality=modality)
        assert (await publish(http, auth, event)).status_code == 200


async def test_every_endpoint_survives_schemathesis(
    api_url: str,
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
) -> None:
    token = await token_for(tenant)
    auth = {"Authorization": f"Bearer {token}"}
    await _catalog(http, auth, tenant, temporal_client, upstream.endpoint_ref)
    outcome = await asyncio.to_thread(_run, api_url, token)
    print(
        f"schemathesis: {len(outcome.operations)} operations, {outcome.calls} calls, "
        f"statuses {dict(sorted(outcome.statuses.items()))}"
    )
    for verdict in outcome.gateway_5xx:
        print(f"schemathesis: gateway verdict {verdict[:300]}")
    assert len(outcome.operations) >= 20, outcome.operations
    # The agent-native surfaces are covered like every other operation, and reached the
    # model (not only their validation).
    for label in ("POST /v1/messages", "POST /v1/messages/count_tokens", "POST /v1/responses"):
        print(f"schemathesis: {label} {dict(sorted(outcome.by_operation[label].items()))}")
        assert 200 in outcome.by_operation[label], (label, outcome.by_operation[label])
    assert not outcome.failures, "\n\n".join(outcome.failures)
    assert 500 not in outcome.statuses
