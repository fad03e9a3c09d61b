"""A stack of the test's own for Temporal going away under a running stream: its own dev server
(to kill, or pause and resume), the workers and an API on it, and one approved profile whose
deployment is the local upstream, reached through the official openai SDK. The provider's
silences are long by design in these tests, so the invoke path's own bounds on them are lifted."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle

from core.settings import Settings
from domain.invocation import invocation_id, invoke_workflow_id
from providers.upstream import Fault, FaultKind, UpstreamServer
from store.receipts import by_key
from tests.helpers.catalog import approved_profile
from tests.helpers.deadline import eventually
from tests.helpers.stack import TemporalDevServer, on_own_temporal, own_temporal, serve, workers

HI: Any = [{"role": "user", "content": "a longer answer, please"}]


@dataclass
class OutageStack:
    dev: TemporalDevServer
    client: Client
    sdk: openai.AsyncOpenAI
    profile: str
    model: str


@asynccontextmanager
async def outage_stack(
    work: Path,
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    token: str,
    tenant: str,
    upstream: UpstreamServer,
    name: str,
) -> AsyncIterator[OutageStack]:
    """The stack, with profile `name` on model `name`-sim."""
    profile, model = name, f"{name}-sim"
    async with own_temporal(work) as dev:
        own = on_own_temporal(
            settings,
            dev,
            name,
            # The provider's silence is not what these tests are about.
            invoke_first_byte_timeout_seconds=60.0,
            invoke_first_token_timeout_seconds=60.0,
            invoke_stream_idle_timeout_seconds=60.0,
        )
        async with workers(own, sessions) as client, serve(own) as api:
            auth = {"Authorization": f"Bearer {token}"}
            deployment = {"provider": "openai", "endpointRef": upstream.endpoint_ref}
            async with httpx.AsyncClient(base_url=api.url, timeout=30) as http:
                await approved_profile(
                    http,
                    auth,
                    client,
                    tenant,
                    profile,
                    {f"{name}/sim": {**deployment, "model": model}},
                )
            sdk = openai.AsyncOpenAI(
                base_url=f"{api.url}/v1", api_key=token, max_retries=0, timeout=90
            )
            yield OutageStack(dev, client, sdk, profile, model)
            await sdk.close()


def silent_after_two(upstream: UpstreamServer, model: str, seconds: float) -> None:
    """The model's next stream: two events, then silence (no keep-alive: its interval is longer)
    until `seconds` pass or the test releases it (upstream.release()), then the rest."""
    upstream.inject(
        model,
        Fault(
            kind=FaultKind.KEEP_ALIVE, after_chunks=2, delay=seconds, interval=seconds * 2, times=1
        ),
    )


async def whole_answer(stack: OutageStack, key: str) -> str:
    """The model's answer to HI, asked without a stream (what a stream of it must add up to)."""
    answer = await stack.sdk.chat.completions.create(
        model=stack.profile, messages=HI, extra_headers={"Idempotency-Key": key}
    )
    return answer.choices[0].message.content or ""


async def first_text(stream: Any) -> tuple[str, Any]:
    """The stream's first text, and its iterator for the rest."""
    chunks = aiter(stream)
    text = ""
    while not text:
        chunk = await anext(chunks)
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
    return text, chunks


async def held_stream(
    stack: OutageStack, upstream: UpstreamServer, key: str, silence: float
) -> tuple[str, str, Any]:
    """The whole answer (asked without a stream first), then a stream of the same request under
    `key` held silent after its first events: the answer it must add up to, the stream's first
    text, and its iterator for the rest."""
    expected = await whole_answer(stack, f"{key}-whole")
    silent_after_two(upstream, stack.model, silence)
    stream = await stack.sdk.chat.completions.create(
        model=stack.profile, messages=HI, stream=True, extra_headers={"Idempotency-Key": key}
    )
    text, chunks = await first_text(stream)
    return expected, text, chunks


async def running(stack: OutageStack, tenant: str, key: str) -> WorkflowHandle[Any, Any]:
    """The key's workflow, once it runs (its call adopted alongside)."""
    handle = stack.client.get_workflow_handle(
        invoke_workflow_id(tenant, str(invocation_id(tenant, key)))
    )

    async def is_running() -> bool:
        try:
            described = await handle.describe()
        except Exception:
            return False
        return described.status is WorkflowExecutionStatus.RUNNING

    await eventually(is_running, timeout=10, interval=0.05)
    return handle


async def logged(caplog: pytest.LogCaptureFixture, text: str, timeout: float) -> None:
    """Until a record saying `text` was logged."""

    def said() -> bool:
        return any(text in r.getMessage() for r in caplog.records)

    await eventually(said, timeout=timeout, interval=0.05)


def capture(caplog: pytest.LogCaptureFixture, *loggers: str) -> None:
    for name in loggers:
        caplog.set_level(logging.INFO, logger=name)


async def receipt(sessions: async_sessionmaker[AsyncSession], tenant: str, key: str) -> Any:
    async with sessions() as session:
        return await by_key(session, tenant, key)


def outage_fixture(name: str) -> Any:
    """A test module's `stack` fixture: the stack with profile `name`, any silence the test left
    held released at the end."""

    @pytest.fixture
    async def stack(
        tmp_path: Path,
        settings: Settings,
        sessions: async_sessionmaker[AsyncSession],
        token_for: Callable[..., Awaitable[str]],
        tenant: str,
        upstream: UpstreamServer,
    ) -> AsyncIterator[OutageStack]:
        token = await token_for(tenant)
        async with outage_stack(tmp_path, settings, sessions, token, tenant, upstream, name) as own:
            try:
                yield own
            finally:
                upstream.release()

    return stack
