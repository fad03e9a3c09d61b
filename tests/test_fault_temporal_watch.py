"""Temporal goes away while a stream runs, for longer than the SDK retries a request (about
10 s), and the stream pauses meanwhile. Its answer and its receipt need no Temporal: the call's
task closes the receipt and hands the answer over in this process.

Once the hub has been quiet a while, the API also watches the workflow's result (a safety net
for a receipt closed elsewhere). A watch that Temporal did not answer used to be taken for the
workflow's end: a stream whose output had begun was then sent the whole stored answer after
what it had (its text twice); a call not yet adopted was stopped, and one that outlasted the
replay's few seconds of reads was answered 503 and stopped, its receipt Cancelled. Now such a
watch is only tried again later.

The provider holds its answer until the watch has failed (the API logs it), then lets it go: the
call ends well before the SDK would give up on the workflow task's own heartbeat (a local
activity's, 8 s into the task, retried as long), whose failure evicts the run and cancels the
call (tests/test_activity_cancelled.py), a separate matter."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client, WorkflowExecutionStatus

from core.settings import Settings
from domain.invocation import invocation_id, invoke_workflow_id
from providers.upstream import Fault, FaultKind, UpstreamServer
from store.receipts import by_key
from tests.conftest import TokenFactory
from tests.helpers.catalog import approved_profile
from tests.helpers.deadline import eventually
from tests.helpers.stack import TemporalDevServer, on_own_temporal, own_temporal, serve, workers

PROFILE, MODEL = "temporal-watch", "temporal-watch-sim"
# The provider's longest silence, Temporal gone meanwhile: past the SDK's ~10 s of retries of
# the watch, which begins once the hub has been quiet for 2 s (api/invocations.QUIET_SECONDS).
# It is released as soon as the watch failed.
SILENCE_SECONDS = 60.0
WATCH_FAILED = "the workflow's result was not answered"
HI: Any = [{"role": "user", "content": "a longer answer, please"}]


@dataclass
class Stack:
    dev: TemporalDevServer
    client: Client
    sdk: openai.AsyncOpenAI


@pytest.fixture
async def stack(
    tmp_path: Path,
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    token_for: TokenFactory,
    tenant: str,
    upstream: UpstreamServer,
) -> AsyncIterator[Stack]:
    async with own_temporal(tmp_path) as dev:
        own = on_own_temporal(
            settings,
            dev,
            "twatch",
            # The provider's silence is not what these tests are about.
            invoke_first_byte_timeout_seconds=60.0,
            invoke_first_token_timeout_seconds=60.0,
            invoke_stream_idle_timeout_seconds=60.0,
        )
        async with workers(own, sessions) as client, serve(own) as api:
            token = await token_for(tenant)
            auth = {"Authorization": f"Bearer {token}"}
            deployment = {"provider": "openai", "endpointRef": upstream.endpoint_ref}
            async with httpx.AsyncClient(base_url=api.url, timeout=30) as http:
                await approved_profile(
                    http, auth, client, tenant, PROFILE, {"tw/sim": {**deployment, "model": MODEL}}
                )
            sdk = openai.AsyncOpenAI(
                base_url=f"{api.url}/v1", api_key=token, max_retries=0, timeout=60
            )
            yield Stack(dev, client, sdk)
            await sdk.close()


async def _running(stack: Stack, tenant: str, key: str) -> None:
    """Until the key's workflow runs (its call adopted alongside)."""
    handle = stack.client.get_workflow_handle(
        invoke_workflow_id(tenant, str(invocation_id(tenant, key)))
    )

    async def running() -> bool:
        try:
            described = await handle.describe()
        except Exception:
            return False
        return described.status is WorkflowExecutionStatus.RUNNING

    await eventually(running, timeout=10, interval=0.05)


async def _watch_failed(caplog: pytest.LogCaptureFixture) -> None:
    """Until the API said that Temporal did not answer the watch of the workflow's result."""

    def said() -> bool:
        return any(WATCH_FAILED in r.getMessage() for r in caplog.records)

    await eventually(said, timeout=30, interval=0.05)


async def _receipt(sessions: async_sessionmaker[AsyncSession], tenant: str, key: str) -> Any:
    async with sessions() as session:
        return await by_key(session, tenant, key)


async def test_a_stream_pausing_through_a_temporal_outage_ends_with_its_answer_once(
    stack: Stack,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="model_router.api")
    key = f"watch-st-{uuid.uuid4().hex[:8]}"
    expected = (
        (
            await stack.sdk.chat.completions.create(
                model=PROFILE, messages=HI, extra_headers={"Idempotency-Key": f"{key}-whole"}
            )
        )
        .choices[0]
        .message.content
    )
    # Two events, then the provider silent (no keep-alive: its interval is longer), then the rest.
    silent = Fault(
        kind=FaultKind.KEEP_ALIVE,
        after_chunks=2,
        delay=SILENCE_SECONDS,
        interval=SILENCE_SECONDS * 2,
        times=1,
    )
    upstream.inject(MODEL, silent)
    stream = await stack.sdk.chat.completions.create(
        model=PROFILE, messages=HI, stream=True, extra_headers={"Idempotency-Key": key}
    )
    text = ""
    chunks = aiter(stream)
    while not text:
        chunk = await anext(chunks)
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
    await _running(stack, tenant, key)
    stack.dev.kill()
    await _watch_failed(caplog)
    upstream.release()
    async for chunk in chunks:
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
    assert text == expected  # all of it, once
    row = await _receipt(sessions, tenant, key)
    assert row is not None and row.outcome == "Completed", row
