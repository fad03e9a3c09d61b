"""A receipt's close the store refuses for its values, not for being away, from a cause no rule
of ours knows yet: the close is written once more without what the provider reported (usage
Unknown, no counts, cost or request id), so the receipt closes and its caller gets the answer.
Before, such a close was retried for as long as the workflow ran, the receipt open and the
caller waiting on it. The refusal is PostgreSQL's own: a trigger refuses any close that carries
the request ids of this test's model."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client

from domain.invocation import invoke_workflow_id
from providers.upstream import UpstreamServer
from providers.upstream.turn import Reply
from tests.conftest import TokenFactory
from tests.helpers.catalog import approved_profile

MODEL = "refused-close"
PREFIX = "req_refused_"
# The first refusal of each close is an outage (SQLSTATE 53300, too many connections) when the
# sequence says so, then a data exception (22023): the close goes to the workflow, which meets
# the refusal for its values. A sequence, as a trigger's own writes are undone with its error.
REFUSE = f"""
CREATE OR REPLACE FUNCTION mr_test_refuse_close() RETURNS trigger AS $$
BEGIN
  IF NEW.ended_at IS NOT NULL AND NEW.provider_request_id LIKE '{PREFIX}%' THEN
    IF nextval('mr_test_outages') <= (SELECT last_value FROM mr_test_outages_wanted) THEN
      RAISE EXCEPTION 'the store is away, for the test' USING ERRCODE = '53300';
    END IF;
    RAISE EXCEPTION 'refused for the test' USING ERRCODE = '22023';
  END IF;
  RETURN NEW;
END $$ LANGUAGE plpgsql
"""


@pytest.fixture
async def refusing(sessions: async_sessionmaker[AsyncSession]) -> AsyncIterator[Any]:
    """The trigger, and a way to ask for outages ahead of the refusals: `await refusing(n)`."""
    async with sessions() as session:
        for sql in (
            "CREATE SEQUENCE IF NOT EXISTS mr_test_outages",
            "CREATE SEQUENCE IF NOT EXISTS mr_test_outages_wanted MINVALUE 0",
            REFUSE,
            "DROP TRIGGER IF EXISTS mr_test_refuse_close ON invocation_receipts",
            "CREATE TRIGGER mr_test_refuse_close BEFORE UPDATE ON invocation_receipts "
            "FOR EACH ROW EXECUTE FUNCTION mr_test_refuse_close()",
        ):
            await session.execute(text(sql))
        await session.commit()

    async def outages(count: int) -> None:
        async with sessions() as session:
            await session.execute(text("SELECT setval('mr_test_outages', 1, false)"))
            await session.execute(text(f"SELECT setval('mr_test_outages_wanted', {count}, true)"))
            await session.commit()

    await outages(0)
    yield outages
    async with sessions() as session:
        await session.execute(text("DROP TRIGGER mr_test_refuse_close ON invocation_receipts"))
        await session.commit()


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
    upstream.state.configure(MODEL, request_id_prefix=PREFIX)
    return auth


async def _invoke(http: httpx.AsyncClient, auth: dict[str, str], stream: bool) -> dict[str, Any]:
    """The call's receipt as the caller got it: in the answer, or as the stream's last event."""
    body = {
        "profileId": "refused",
        "runId": str(uuid.uuid4()),
        "request": {"messages": [{"role": "user", "content": "close me"}], "max_tokens": 50},
        "stream": stream,
    }
    if not stream:
        resp = await http.post("/gateway/invoke", headers=auth, json=body, timeout=60)
        assert resp.status_code == 200, resp.text
        assert resp.json()["output"]["text"] == "a fine answer"
        return dict(resp.json()["receipt"])
    async with http.stream("POST", "/gateway/invoke", headers=auth, json=body, timeout=60) as sse:
        assert sse.status_code == 200
        lines = [line async for line in sse.aiter_lines()]
    text_sent = "".join(
        json.loads(line.removeprefix("data: ")).get("text", "")
        for line, kind in zip(lines[1:], lines, strict=False)
        if kind == "event: text_delta" and line.startswith("data: ")
    )
    assert text_sent == "a fine answer", lines
    events = [line.removeprefix("event: ") for line in lines if line.startswith("event: ")]
    assert events[-1] == "receipt", events
    [*_, last] = [line for line in lines if line.startswith("data: ")]
    return dict(json.loads(last.removeprefix("data: ")))


def _without_reports(receipt: dict[str, Any]) -> None:
    assert receipt["outcome"] == "Completed" and receipt["usageStatus"] == "Unknown"
    for field in ("inputTokens", "outputTokens", "estimatedCostUsd", "providerRequestId"):
        assert receipt.get(field) is None, (field, receipt)


async def _stored(http: httpx.AsyncClient, auth: dict[str, str], receipt: dict[str, Any]) -> Any:
    resp = await http.get(f"/factory/runs/{receipt['runId']}/model-receipts", headers=auth)
    assert resp.status_code == 200, resp.text
    [stored] = resp.json()
    assert stored["invocationId"] == receipt["invocationId"] and stored["endedAt"] is not None
    return stored


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_a_close_refused_for_its_values_is_written_without_the_providers_figures(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    refusing: Any,
    stream: bool,
) -> None:
    calls = upstream.state.stats.count(MODEL)
    receipt = await _invoke(http, auth, stream)
    _without_reports(receipt)
    _without_reports(await _stored(http, auth, receipt))
    assert upstream.state.stats.count(MODEL) == calls + 1


async def test_the_workflow_writes_a_close_refused_for_its_values_without_the_figures_too(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    temporal_client: Client,
    tenant: str,
    refusing: Any,
) -> None:
    # The call's own close meets an outage: the workflow takes the close over (FINALIZE), meets
    # the refusal for its values, and writes it without the provider's figures; the caller's
    # answer carries the receipt it wrote.
    await refusing(1)
    receipt = await _invoke(http, auth, stream=False)
    _without_reports(receipt)
    _without_reports(await _stored(http, auth, receipt))
    handle = temporal_client.get_workflow_handle(
        invoke_workflow_id(tenant, receipt["invocationId"])
    )
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        async for e in handle.fetch_history_events()
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    assert scheduled == ["finalize_receipt"], scheduled
