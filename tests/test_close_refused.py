"""A receipt's close the store refuses for its values, not for being away, from a cause no rule
of ours knows yet: the close is written once more without what the provider reported (usage
Unknown, no counts, cost or request id), so the receipt closes and its caller gets the answer.
Before, such a close was retried for as long as the workflow ran, the receipt open and the
caller waiting on it. The refusal is PostgreSQL's own (tests/helpers/refused_close.py): a
trigger refuses the key's close while it carries the provider's request id."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client

from core import metrics
from domain.invocation import invoke_workflow_id
from providers.upstream import UpstreamServer
from providers.upstream.turn import Reply
from tests.conftest import TokenFactory
from tests.helpers.catalog import approved_profile
from tests.helpers.gateway_calls import invoke, stored
from tests.helpers.refused_close import refused_close

MODEL = "refused-close"
# 22023 (invalid parameter value): a data exception, the close's values at fault; refused only
# while the close carries the provider's request id, so the close without it goes through.
DATA_EXCEPTION = "22023"
WITH_REPORTS = "NEW.provider_request_id IS NOT NULL"


@pytest.fixture
async def auth(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
) -> dict[str, str]:
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    deployment = {"model": MODEL, "endpointRef": upstream.endpoint_ref}
    await approved_profile(http, auth, temporal_client, tenant, "refused", {"rc/a": deployment})
    upstream.register(MODEL, lambda turn: Reply(text="a fine answer"))
    return auth


def _without_reports(receipt: dict[str, Any]) -> None:
    assert receipt["outcome"] == "Completed" and receipt["usageStatus"] == "Unknown"
    figures = ("inputTokens", "outputTokens", "cacheWriteInputTokens", "estimatedCostUsd")
    for field in (*figures, "providerRequestId"):
        assert receipt.get(field) is None, (field, receipt)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_a_close_refused_for_its_values_is_written_without_the_providers_figures(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    stream: bool,
) -> None:
    key = f"rc-{uuid.uuid4().hex}"
    calls = upstream.state.stats.count(MODEL)
    async with refused_close(sessions, key, sqlstate=DATA_EXCEPTION, also=WITH_REPORTS) as fault:
        text, receipt = await invoke(http, auth, "refused", stream=stream, key=key)
        assert await fault.refused()
    assert text == "a fine answer"
    _without_reports(receipt)
    _without_reports(await stored(http, auth, receipt))
    assert upstream.state.stats.count(MODEL) == calls + 1


async def test_the_workflow_writes_a_close_refused_for_its_values_without_the_figures_too(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    temporal_client: Client,
    tenant: str,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    # The call's own close meets the store away: the workflow takes the close over (FINALIZE),
    # meets the refusal for its values, and writes it without the provider's figures; the
    # caller's answer carries the receipt it wrote.
    key = f"rc-{uuid.uuid4().hex}"
    counted = {"tenant": tenant, "profile": "refused", "provider": "openai"}
    before = metrics.invocations.value({**counted, "outcome": "Completed"})
    async with refused_close(
        sessions, key, sqlstate=DATA_EXCEPTION, away_first=1, also=WITH_REPORTS
    ):
        text, receipt = await invoke(http, auth, "refused", stream=False, key=key)
    assert text == "a fine answer"
    _without_reports(receipt)
    # The workflow's close counts the invocation, as the call's own close does; once.
    assert metrics.invocations.value({**counted, "outcome": "Completed"}) == before + 1
    _without_reports(await stored(http, auth, receipt))
    handle = temporal_client.get_workflow_handle(
        invoke_workflow_id(tenant, receipt["invocationId"])
    )
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        async for e in handle.fetch_history_events()
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert scheduled == ["finalize_receipt"], scheduled
