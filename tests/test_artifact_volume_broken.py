"""A broken artifact volume does not fail the calls the provider answered: the caller gets its
answer and the receipt closes Completed with its reference (a replay of that key then finds no
stored answer, as once retention removed it), and the failure is logged without content. The
answer's file is written beside the receipt's close and the answer (activities/invoke_close.py), and
read for a replay, off the event loop and within a bound (store/artifact_files.py): a volume
that does not answer holds neither the process nor the replay past the bound."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
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
from activities.invoke_hub import InvocationHub, ReceiptReady
from activities.invoke_setup import provider_timeouts
from activities.secret_policy import endpoint_broker
from core.settings import Settings
from domain.enums import InvocationOutcome
from domain.invocation import Disposition, Target
from providers.types import ChatRequest, Message
from providers.upstream import UpstreamServer
from store.artifact_files import WAIT_SECONDS
from tests.conftest import TokenFactory
from tests.helpers.catalog import approved_profile
from tests.helpers.deadline import eventually
from tests.helpers.invocations import invocation_input
from tests.helpers.stalled_volume import StalledVolume
from tests.helpers.surfaces import receipt

SECRET = "the-words-of-this-prompt"


def _no_answer_files(settings: Settings, tenant: str) -> None:
    """The tenant's artifact folder cannot be made: a file stands where it would be."""
    settings.artifact_root.mkdir(parents=True, exist_ok=True)
    (settings.artifact_root / tenant).write_bytes(b"not a folder")


async def test_an_answer_whose_file_cannot_be_written_still_reaches_the_caller(
    api_url: str,
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    caplog: pytest.LogCaptureFixture,
) -> None:
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    at = {"provider": "openai", "model": "av-sim", "endpointRef": upstream.endpoint_ref}
    await approved_profile(http, auth, temporal_client, tenant, "filed", {"av/a": at})
    _no_answer_files(settings, tenant)
    sdk = openai.AsyncOpenAI(base_url=f"{api_url}/v1", api_key="unused", max_retries=0)
    key = f"av-{uuid.uuid4().hex}"
    with caplog.at_level(logging.ERROR, logger="model_router.invoke"):
        done = await sdk.chat.completions.create(
            model="filed",
            messages=[{"role": "user", "content": SECRET}],
            extra_headers={**auth, "Idempotency-Key": key},
        )
        assert done.choices[0].message.content
        row = await receipt(sessions, tenant, key)
        assert row.outcome is InvocationOutcome.COMPLETED and row.ended_at is not None
        assert row.output_artifact_ref is not None
        assert row.output_artifact_ref.startswith("sha256:")
        # The file is written beside the answer, not ahead of it: its failure is logged as
        # the call's task ends.
        await eventually(
            lambda: any("output artifact not written" in r.getMessage() for r in caplog.records)
        )
    assert SECRET not in caplog.text


async def test_a_replay_without_its_stored_answer_is_a_failure_on_both_wires_never_empty(
    api_url: str,
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    at = {"provider": "openai", "model": "av-sim", "endpointRef": upstream.endpoint_ref}
    await approved_profile(http, auth, temporal_client, tenant, "unfiled", {"av/u": at})
    # No answer's file can be written (as when the API dies between the receipt's close and
    # the file): the receipt says Completed, and a replay finds nothing to give back.
    _no_answer_files(settings, tenant)
    sdk = openai.AsyncOpenAI(base_url=f"{api_url}/v1", api_key="unused", max_retries=0)
    key = f"av-{uuid.uuid4().hex}"
    ask: Any = {
        "model": "unfiled",
        "messages": [{"role": "user", "content": SECRET}],
        "stream": True,
        "extra_headers": {**auth, "Idempotency-Key": key},
    }
    first = [c async for c in await sdk.chat.completions.create(**ask)]
    assert "".join(c.choices[0].delta.content or "" for c in first if c.choices)
    assert (await receipt(sessions, tenant, key)).outcome is InvocationOutcome.COMPLETED
    # Streamed, the replay ends with the failure's error event, not a clean end with no text.
    with pytest.raises(openai.APIError) as streamed:
        [c async for c in await sdk.chat.completions.create(**ask)]
    assert getattr(streamed.value, "type", None) == "output_unavailable", streamed.value
    # Whole, it is the same failure as a status.
    with pytest.raises(openai.APIStatusError) as whole:
        await sdk.chat.completions.create(**{**ask, "stream": False})
    assert whole.value.status_code == 502
    assert whole.value.response.json()["error"]["type"] == "output_unavailable"
    assert whole.value.response.json()["closeReason"] == "completed"


async def test_an_embed_or_rerank_replay_without_its_stored_result_is_a_failure_never_empty(
    api_url: str,
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
    settings: Settings,
) -> None:
    # As for a chat answer: a Completed receipt whose result cannot be read replays as the
    # failure `output_unavailable`. It was an empty list of vectors (an index written with
    # nothing), no ranking at all, or a 500 on /gateway/embed.
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    embed_at = {"provider": "openai", "model": "av-embed", "endpointRef": upstream.endpoint_ref}
    rank_at = {"provider": "rerank", "model": "av-rank", "endpointRef": upstream.endpoint_ref}
    await approved_profile(
        http, auth, temporal_client, tenant, "av-embed", {"av/e": embed_at}, required={},
        modality="Embedding",
    )  # fmt: skip
    await approved_profile(
        http, auth, temporal_client, tenant, "av-rank", {"av/r": rank_at}, required={},
        modality="Rerank",
    )  # fmt: skip
    _no_answer_files(settings, tenant)
    sdk = openai.AsyncOpenAI(base_url=f"{api_url}/v1", api_key="unused", max_retries=0)
    key = {**auth, "Idempotency-Key": f"av-{uuid.uuid4().hex}"}
    first = await sdk.embeddings.create(model="av-embed", input=SECRET, extra_headers=key)
    assert len(first.data) == 1
    with pytest.raises(openai.APIStatusError) as replayed:
        await sdk.embeddings.create(model="av-embed", input=SECRET, extra_headers=key)
    assert replayed.value.status_code == 502
    assert replayed.value.response.json()["error"]["type"] == "output_unavailable"
    embed = {"profileId": "av-embed", "inputs": [SECRET], "idempotencyKey": uuid.uuid4().hex}
    rank = {
        "profileId": "av-rank",
        "query": SECRET,
        "documents": ["a", "b"],
        "idempotencyKey": uuid.uuid4().hex,
    }
    for path, body in (("/gateway/embed", embed), ("/gateway/rerank", rank)):
        answered = await http.post(path, headers=auth, json=body)
        assert answered.status_code == 200, answered.text
        again = await http.post(path, headers=auth, json=body)
        assert again.status_code == 502, (path, again.text)
        assert again.json()["error"]["type"] == "output_unavailable", again.text


async def test_a_replay_whose_stored_answer_the_volume_does_not_give_back_is_not_held(
    api_url: str,
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    caplog: pytest.LogCaptureFixture,
) -> None:
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    at = {"provider": "openai", "model": "av-sim", "endpointRef": upstream.endpoint_ref}
    await approved_profile(http, auth, temporal_client, tenant, "stalled", {"av/s": at})
    sdk = openai.AsyncOpenAI(base_url=f"{api_url}/v1", api_key="unused", max_retries=0)
    key = f"av-{uuid.uuid4().hex}"
    ask = {
        "model": "stalled",
        "messages": [{"role": "user", "content": SECRET}],
        "extra_headers": {**auth, "Idempotency-Key": key},
    }
    assert (await sdk.chat.completions.create(**ask)).choices[0].message.content  # type: ignore[call-overload]
    row = await receipt(sessions, tenant, key)
    assert row.output_artifact_ref is not None
    # The stored answer's path becomes a FIFO with no writer: a read's open() waits in the
    # kernel, as on a volume that does not answer. Read on the event loop, it would hold the
    # whole process (this test's loop included) until the FIFO is opened for writing.
    digest = row.output_artifact_ref.removeprefix("sha256:")
    path = settings.artifact_root / tenant / digest[:2] / digest
    await eventually(path.is_file)  # written beside the answer, not ahead of it
    path.unlink()
    os.mkfifo(path)
    released = threading.Event()

    def release() -> None:
        released.set()
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))

    # A last resort, far past the bound, so that a read held on the loop fails the test below
    # instead of hanging it.
    unstick = threading.Timer(15 * WAIT_SECONDS, release)
    unstick.start()
    try:
        with caplog.at_level(logging.WARNING, logger="model_router.api"):
            replay = asyncio.ensure_future(sdk.chat.completions.create(**ask))  # type: ignore[call-overload]
            answered = await asyncio.wait({replay}, timeout=30 * WAIT_SECONDS)
        assert replay in answered[0]
        # Answered while the read was still waiting in the kernel: it did not hold the loop.
        assert not released.is_set()
        # Without its stored answer a replay has no content to give: it answers as it does
        # for an answer its tenant's retention removed.
        with pytest.raises(openai.APIStatusError) as failed:
            replay.result()
        assert failed.value.status_code == 502
    finally:
        unstick.cancel()
        if not released.is_set():
            release()
    assert any("stored answer not read" in r.getMessage() for r in caplog.records)
    assert SECRET not in caplog.text


async def test_the_answer_goes_before_its_file_and_the_call_ends_after_it(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """The caller's answer does not wait for the volume; the activity's result (the workflow's,
    which a replay of the key waits for before it reads the file) does."""
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    at = {"provider": "openai", "model": "av-sim", "endpointRef": upstream.endpoint_ref}
    await approved_profile(http, auth, temporal_client, tenant, "filing", {"av/w": at})
    volume = StalledVolume(settings.artifact_root)
    hub = InvocationHub()
    adapters = AdapterPool(endpoint_broker(settings), provider_timeouts(settings))
    acts = InvokeActivities(sessions, hub, adapters, volume)
    token, pending = hub.open(ChatRequest(messages=(Message(role="user", content=SECRET),)))
    target = Target(
        deployment_id="av/w", provider="openai", model="av-sim", endpoint_ref=upstream.endpoint_ref
    )
    data = invocation_input(tenant, profile_id="filing", target=target, caller_token=token)
    run = asyncio.ensure_future(ActivityEnvironment().run(acts.call_provider, data))
    seen: list[object] = []

    def answered() -> bool:
        while not pending.events.empty():
            seen.append(pending.events.get_nowait())
        return any(isinstance(item, ReceiptReady) for item in seen)

    try:
        await eventually(answered)
        # The caller has its answer, its receipt closed, while the volume holds the file.
        assert volume.writes == 1 and not volume.answer.is_set()
        assert not run.done()
    finally:
        volume.answer.set()
    summary = await run
    assert summary.disposition is Disposition.DONE and summary.output_artifact_ref is not None
    assert volume.get(tenant, summary.output_artifact_ref) is not None
    acts.files.close()
    await adapters.aclose()
