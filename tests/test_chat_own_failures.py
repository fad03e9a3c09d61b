"""Failures that are the gateway's own, not the provider's: a request our side cannot build for
the provider (a number its JSON encoding refuses, which the edge now refuses first) closes the
call as `internal`, with no retry, no fallback and no breaker strike on a healthy deployment
(it was a cut stream, retried three times, and a strike each); and a deployment whose
credentials do not resolve tells its caller so in general words, the operator the reference
and why in the log (the caller's 502 named the endpointRef and the variable behind it)."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import httpx
import openai
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client
from temporalio.testing import ActivityEnvironment

from activities.adapter_pool import AdapterPool
from activities.invoke import InvokeActivities
from activities.invoke_hub import InvocationHub
from activities.invoke_setup import provider_timeouts
from activities.resilience import Resilience
from activities.secret_policy import endpoint_broker
from core.settings import Settings
from domain.enums import InvocationOutcome
from domain.invocation import Target
from providers.types import ChatRequest, Message, Tool
from providers.upstream import UpstreamServer
from store.artifacts import ArtifactStore
from tests.conftest import TokenFactory
from tests.helpers.catalog import approved_profile
from tests.helpers.invocations import invocation_input


async def test_a_request_our_side_cannot_encode_is_our_failure_never_the_providers(
    upstream: UpstreamServer, settings: Settings, sessions: async_sessionmaker[AsyncSession]
) -> None:
    tenant, model = f"tenant-{uuid.uuid4().hex[:8]}", f"own-{uuid.uuid4().hex[:8]}"
    # Built in-process, past the edge that refuses such a body: what any value of ours the
    # provider SDK cannot encode would do.
    unsendable = Tool(
        name="count",
        parameters={"type": "object", "properties": {"n": {"maximum": float("inf")}}},
    )
    request = ChatRequest(messages=(Message(role="user", content="hi"),), tools=(unsendable,))
    hub = InvocationHub()
    adapters = AdapterPool(endpoint_broker(settings), provider_timeouts(settings))
    acts = InvokeActivities(
        sessions, hub, adapters, ArtifactStore(settings.artifact_root), Resilience()
    )
    token, _ = hub.open(request)
    target = Target(
        deployment_id="own/a", provider="openai", model=model, endpoint_ref=upstream.endpoint_ref
    )
    data = invocation_input(tenant, target=target, caller_token=token)
    try:
        summary = await ActivityEnvironment().run(acts.call_provider, data)
    finally:
        acts.files.close()
        await adapters.aclose()
    # Closed as the gateway's own failure: never retried, never a strike on the deployment.
    assert (summary.outcome, summary.error_kind) == (InvocationOutcome.FAILED, "internal")
    assert acts.breakers.get(tenant, "own/a").failures == 0
    assert upstream.requests(model) == 0


async def test_unresolved_credentials_are_told_generally_and_logged_in_full(
    api_url: str,
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    caplog: pytest.LogCaptureFixture,
) -> None:
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    variable = f"MODEL_ROUTER_PROVIDER_GONE_{uuid.uuid4().hex[:8].upper()}"  # allowed, unset
    profile = f"gone-{uuid.uuid4().hex[:8]}"
    at = {"provider": "openai", "model": "gone-sim", "endpointRef": f"env:{variable}"}
    await approved_profile(http, auth, temporal_client, tenant, profile, {"gone/a": at})
    messages: Any = [{"role": "user", "content": "hello"}]
    async with openai.AsyncOpenAI(
        base_url=f"{api_url}/v1", api_key=auth["Authorization"][7:], max_retries=0
    ) as sdk:
        with caplog.at_level(logging.WARNING, logger="model_router.invoke"):
            with pytest.raises(openai.APIStatusError) as failed:
                await sdk.chat.completions.create(model=profile, messages=messages)
    response = failed.value.response
    assert response.status_code == 502
    said = response.text
    assert "the deployment's credentials could not be resolved" in said, said
    assert variable not in said and "endpointRef" not in said and "env:" not in said, said
    assert response.json()["reason"] == "the deployment's credentials could not be resolved"
    # The operator's log has which deployment, which reference and why.
    logged = [r.getMessage() for r in caplog.records if r.name == "model_router.invoke"]
    assert any("gone/a" in m and variable in m and "not set" in m for m in logged), logged
