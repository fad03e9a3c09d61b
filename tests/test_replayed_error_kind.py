"""A keyed call that failed before any output replays as it was answered, by the failure's own
kind, which its receipt keeps (`error_kind`, migration 0022). The close reason names every
provider failure `provider`: told by it alone, a replayed rate limit or provider 5xx was a
permanent 502 (`error.code: provider`, `errorClass: permanent`) with no `x-should-retry: false`,
which the SDKs retried twice more. Through the real SDKs against the API and the local
upstream; and the migration on both engines, with the receipts closed before it replaying by
their close reason as before."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
import sqlalchemy as sa
from sqlmodel import select

from domain.enums import InvocationOutcome, UsageStatus
from domain.invocation import InvocationSummary, Target
from providers.upstream import Fault, FaultKind, UpstreamServer
from store.db import create_engine, session_factory
from store.migrate import downgrade, upgrade
from store.receipt_statements import ReceiptStatements
from store.receipts import summary_of
from store.tables import InvocationReceiptRow
from tests.conftest import TokenFactory, create_database, drop_database
from tests.helpers.invocations import invocation_input
from tests.helpers.surfaces import Catalog

MESSAGES: Any = [{"role": "user", "content": "status please"}]


@pytest.fixture
async def token(token_for: TokenFactory, tenant: str) -> str:
    return await token_for(tenant)


@pytest.mark.parametrize(
    ("fault", "status", "kind"),
    [
        # Every attempt a 500 (the fault stays until cleared): retried by the gateway, then
        # answered as Chat Completions answers a provider's server error, a 503.
        (Fault(kind=FaultKind.SERVER_ERROR), 503, "server_error"),
        # Its Retry-After is past what the router waits itself: OpenAI's 429 at once.
        (Fault(kind=FaultKind.RATE_LIMIT, retry_after=3), 429, "rate_limit"),
    ],
)
async def test_a_replayed_transient_provider_failure_keeps_its_status_on_chat_completions(
    api_url: str,
    token: str,
    catalog: Catalog,
    upstream: UpstreamServer,
    fault: Fault,
    status: int,
    kind: str,
) -> None:
    model, profile = catalog.model("openai"), catalog.profile("openai")
    key = {"Idempotency-Key": f"ek-{uuid.uuid4().hex}"}
    sent: list[str] = []

    async def count(request: httpx.Request) -> None:
        sent.append(request.url.path)

    upstream.inject(model, fault)
    try:
        async with openai.DefaultAsyncHttpxClient(event_hooks={"request": [count]}) as transport:
            # The SDK's own retries on, for the replay: what it does with the answer's advice.
            sdk = openai.AsyncOpenAI(
                base_url=f"{api_url}/v1", api_key=token, max_retries=2, http_client=transport
            )
            with pytest.raises(openai.APIStatusError) as live:
                await sdk.with_options(max_retries=0).chat.completions.create(
                    model=profile, messages=MESSAGES, extra_headers=key
                )
            assert live.value.status_code == status, live.value.response.text
            calls = upstream.requests(model)
            with pytest.raises(openai.APIStatusError) as again:
                await sdk.chat.completions.create(
                    model=profile, messages=MESSAGES, extra_headers=key
                )
    finally:
        upstream.state.clear_faults(model)
    assert type(again.value) is type(live.value)
    replayed, first = again.value.response, live.value.response
    assert replayed.status_code == status, replayed.text
    body = replayed.json()
    assert body["receiptId"] == first.json()["receiptId"]
    # OpenAI's type and code for its kind, as the live answer gave them (a rate limit's code
    # `rate_limit_exceeded`); the kind itself in the detail.
    assert body["errorClass"] == "transient" and f"({kind})" in body["detail"], body
    told = first.json()["error"]
    assert (body["error"]["type"], body["error"]["code"]) == (told["type"], told["code"]), body
    # The close reason is what it always was: operators count by it.
    assert body["closeReason"] == "provider", body
    # Not its first advice: sending this key again can only replay it.
    assert "Retry-After" not in replayed.headers and int(first.headers["Retry-After"]) >= 1
    assert replayed.headers["x-should-retry"] == "false"
    assert "new Idempotency-Key" in body["error"]["message"], body
    # Told not to, the SDK sent it once (not three times); the gateway called no provider.
    assert len(sent) == 2 and upstream.requests(model) == calls


@pytest.fixture
async def claude(api_url: str, token: str) -> AsyncIterator[anthropic.AsyncAnthropic]:
    async with anthropic.AsyncAnthropic(base_url=api_url, api_key=token, max_retries=0) as c:
        yield c


@pytest.mark.parametrize(
    ("fault", "raised"),
    [
        (Fault(kind=FaultKind.RATE_LIMIT, retry_after=3), anthropic.RateLimitError),
        (Fault(kind=FaultKind.OVERLOADED, retry_after=3), anthropic.OverloadedError),
    ],
)
async def test_a_replayed_transient_provider_failure_is_the_same_error_on_messages(
    claude: anthropic.AsyncAnthropic,
    catalog: Catalog,
    upstream: UpstreamServer,
    fault: Fault,
    raised: type[anthropic.APIStatusError],
) -> None:
    model, key = catalog.model("anthropic"), f"ek-{uuid.uuid4().hex}"
    request: Any = {
        "model": catalog.profile("anthropic"),
        "max_tokens": 50,
        "messages": MESSAGES,
        "extra_headers": {"Idempotency-Key": key},
    }
    upstream.inject(model, fault)
    try:
        with pytest.raises(anthropic.APIStatusError) as live:
            await claude.messages.create(**request)
        calls = upstream.requests(model)
        with pytest.raises(anthropic.APIStatusError) as again:
            await claude.messages.create(**request)
    finally:
        upstream.state.clear_faults(model)
    # The same exception class the live call raised (it was InternalServerError, a 502).
    assert type(live.value) is raised, live.value.response.text
    assert type(again.value) is raised, again.value.response.text
    replayed = again.value.response
    assert replayed.status_code == live.value.status_code
    body = replayed.json()
    assert body["errorClass"] == "transient" and body["closeReason"] == "provider", body
    assert body["error"]["type"] == live.value.response.json()["error"]["type"], body
    assert replayed.headers["x-should-retry"] == "false"
    assert upstream.requests(model) == calls


async def _rows(url: str) -> dict[uuid.UUID, InvocationReceiptRow]:
    engine = create_engine(url)
    try:
        async with session_factory(engine)() as session:
            found = (await session.scalars(select(InvocationReceiptRow))).all()
    finally:
        await engine.dispose()
    return {row.invocation_id: row for row in found}


async def _columns(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(
                lambda c: {x["name"] for x in sa.inspect(c).get_columns("invocation_receipts")}
            )
    finally:
        await engine.dispose()


_TARGET = Target(deployment_id="ek/a", provider="openai", model="m", endpoint_ref="env:X")


async def _error_kind_round_trip(url: str) -> None:
    await asyncio.to_thread(upgrade, url)
    assert "error_kind" in await _columns(url)
    tenant = f"ek-{uuid.uuid4().hex[:8]}"
    engine = create_engine(url)
    statements = ReceiptStatements(engine)
    try:
        # A rate limit closed by the workflow's close; one left open, closed by the sweeper.
        limited, left = (invocation_input(tenant, target=_TARGET) for _ in range(2))
        assert await statements.claim(limited, "ek/a")
        failure = InvocationSummary(
            invocation_id=limited.invocation_id,
            outcome=InvocationOutcome.FAILED,
            usage_status=UsageStatus.ESTIMATED,
            error_kind="rate_limit",
        )
        assert await statements.close(tenant, failure)
        claimed_at = datetime(2026, 12, 1, tzinfo=UTC)
        assert await statements.claim(left, "ek/a", claimed_at)
        assert await statements.sweep(tenant, left.invocation_id, claimed_at)
    finally:
        await statements.aclose()
        await engine.dispose()
    rows = await _rows(url)
    row, swept = rows[limited.invocation_id], rows[left.invocation_id]
    assert (row.close_reason, row.error_kind) == ("provider", "rate_limit")
    assert summary_of(row).error_kind == "rate_limit"
    assert (swept.close_reason, swept.error_kind) == ("swept", "swept")

    # Downgraded, the column goes and the receipts stay; upgraded again, a receipt closed
    # before the column replays by its close reason, as the code before it did.
    await asyncio.to_thread(downgrade, url, "0021")
    assert "error_kind" not in await _columns(url)
    await asyncio.to_thread(upgrade, url)
    assert "error_kind" in await _columns(url)
    row = (await _rows(url))[limited.invocation_id]
    assert (row.close_reason, row.error_kind) == ("provider", None)
    assert summary_of(row).error_kind == "provider"


async def test_the_error_kind_column_migrates_on_sqlite(tmp_path: Path) -> None:
    await _error_kind_round_trip(f"sqlite+aiosqlite:///{tmp_path}/ek.db")


async def test_the_error_kind_column_migrates_on_postgresql() -> None:
    url = await create_database("mr_error_kind")
    try:
        await _error_kind_round_trip(url)
    finally:
        await drop_database(url)
