"""A retry of a key whose receipt is still open though its workflow has ended (an operator
terminated it, or it failed with its close refused by the store): the retry reads the receipt
a few times, spaced out over about 5 s (`api.replays.OPEN_RECEIPT_PAUSES`), and is then told
to come back (503 `invocation-in-progress`, `Retry-After`), never calling the provider again; a
receipt that closes during those reads is replayed at once.

The state is made from a call answered through the gateway, its workflow ended, and its receipt
set open again afterwards: only the receipt's `ended_at` tells a retry whether it is closed."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import datetime

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletion
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col
from temporalio.client import Client

from api.replays import NOT_FINISHED_RETRY_AFTER_SECONDS, OPEN_RECEIPT_PAUSES
from providers.upstream import UpstreamServer
from store.db import transaction
from store.receipts import by_key
from store.tables import InvocationReceiptRow
from tests.conftest import TokenFactory
from tests.helpers.catalog import approved_profile
from tests.helpers.deadline import UNBOUNDED, eventually
from tests.helpers.receipt_reads import ReceiptReads, receipt_reads

PROFILE, MODEL = "reopened", "reopened-sim"
# The reads of a retry whose receipt stays open: the one that found its key used, then one
# after each pause; a dozen at most, where the 100 reads 50 ms apart these replaced counted 101
# (every retry of a key left to the sweeper read it 20 times a second).
READS_WHILE_OPEN = 1 + len(OPEN_RECEIPT_PAUSES)
MOST_READS = 12


@pytest.fixture
async def sdk(
    http: httpx.AsyncClient,
    api_url: str,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
) -> AsyncIterator[openai.AsyncOpenAI]:
    token = await token_for(tenant)
    auth = {"Authorization": f"Bearer {token}"}
    target = {"provider": "openai", "model": MODEL, "endpointRef": upstream.endpoint_ref}
    await approved_profile(http, auth, temporal_client, tenant, PROFILE, {"ro/sim": target})
    async with openai.AsyncOpenAI(base_url=f"{api_url}/v1", api_key=token, max_retries=0) as client:
        yield client


def _call(sdk: openai.AsyncOpenAI, key: str) -> asyncio.Task[ChatCompletion]:
    return asyncio.create_task(
        sdk.chat.completions.create(
            model=PROFILE,
            messages=[{"role": "user", "content": "answered once"}],
            extra_headers={"Idempotency-Key": key},
        )
    )


async def _set_ended(
    sessions: async_sessionmaker[AsyncSession], invocation_id: uuid.UUID, at: datetime | None
) -> None:
    async with transaction(sessions) as session:
        await session.execute(
            update(InvocationReceiptRow)
            .where(col(InvocationReceiptRow.invocation_id) == invocation_id)
            .values(ended_at=at)
        )


async def _answered_then_reopened(
    sdk: openai.AsyncOpenAI,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    key: str,
) -> tuple[ChatCompletion, InvocationReceiptRow]:
    """A call answered through the gateway, its workflow ended, then its receipt open again."""
    done = await _call(sdk, key)
    async with sessions() as session:
        row = await by_key(session, tenant, key)
    assert row is not None and row.ended_at is not None
    await _set_ended(sessions, row.invocation_id, None)
    return done, row


async def test_a_retry_of_a_key_left_open_reads_it_a_few_times_then_is_told_to_come_back(
    sdk: openai.AsyncOpenAI,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    upstream: UpstreamServer,
) -> None:
    key = f"ro-open-{uuid.uuid4().hex[:8]}"
    await _answered_then_reopened(sdk, sessions, tenant, key)
    before = upstream.requests(MODEL)
    with receipt_reads(key) as reads, pytest.raises(openai.APIStatusError) as again:
        await asyncio.wait_for(_call(sdk, key), timeout=UNBOUNDED)
    assert again.value.status_code == 503
    assert again.value.response.json()["type"].endswith("/invocation-in-progress")
    assert again.value.response.headers["retry-after"] == str(NOT_FINISHED_RETRY_AFTER_SECONDS)
    assert reads.seen == READS_WHILE_OPEN <= MOST_READS
    assert upstream.requests(MODEL) == before


async def test_a_receipt_closed_during_a_retrys_reads_is_replayed_without_a_second_call(
    sdk: openai.AsyncOpenAI,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    upstream: UpstreamServer,
) -> None:
    key = f"ro-late-{uuid.uuid4().hex[:8]}"
    done, row = await _answered_then_reopened(sdk, sessions, tenant, key)
    before = upstream.requests(MODEL)

    async def closed_after(reads: ReceiptReads, count: int) -> None:
        await eventually(lambda: reads.seen >= count, timeout=UNBOUNDED)
        await _set_ended(sessions, row.invocation_id, row.ended_at)

    with receipt_reads(key) as reads:
        # Closed once the retry has found it open twice after its first read.
        closing = asyncio.create_task(closed_after(reads, 3))
        replayed = await asyncio.wait_for(_call(sdk, key), timeout=UNBOUNDED)
        await closing
    assert replayed.choices[0].message.content == done.choices[0].message.content
    assert 3 < reads.seen < READS_WHILE_OPEN
    assert upstream.requests(MODEL) == before
