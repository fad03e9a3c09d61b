"""Temporal taken away from a gateway (its own dev server, killed and started again on the same
port, or paused): a call is refused with a 503 problem and `Retry-After` within the configured
bound, later calls at once while it is known unreachable, with no connection dropped, nothing
claimed or called and no prompt left in memory; `/readyz` says the same; a retry of a key
answered before is replayed from the store meanwhile; a restart shorter than the bound is
absorbed. Just after Temporal answered, a call's provider call runs alongside its start: its
receipt closes as the call ends, and its answer completes only once the start is in (a stream's
output flows meanwhile), unless the process's lead of answers over their starts has a place
free: then the answer goes at once, and its workflow runs once Temporal is back, or, if its
start fails, the receipt stays closed and the key replays it. A start that then fails cancels a
call still running and undoes its claim; a call that had ended keeps its receipt, its caller
gets the answer, and a retry of its key replays it without calling the provider again. A call
that ended with its close refused by the store keeps its claim as well: closed late and
answered, or left open, and its key is never called twice."""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import httpx
import openai
import pytest
from openai import AsyncStream
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client, WorkflowExecutionStatus

from core import metrics
from core.settings import Settings
from domain.invocation import invoke_workflow_id
from domain.sweep import unstarted_bound
from providers.upstream import UpstreamServer
from providers.upstream.faults import Fault, FaultKind
from store.receipts import by_key
from tests.conftest import TokenFactory
from tests.helpers.catalog import approved_profile
from tests.helpers.deadline import UNBOUNDED, eventually
from tests.helpers.receipt_reads import receipt_reads
from tests.helpers.refused_close import RefusedClose, refused_close
from tests.helpers.stack import (
    Served,
    TemporalDevServer,
    on_own_temporal,
    own_temporal,
    serve,
    workers,
)

PROFILE, MODEL = "temporal-fault", "temporal-fault-sim"


@dataclass
class Stack:
    dev: TemporalDevServer
    api: Served
    auth: dict[str, str]
    token: str
    bound: float
    client: Client

    def sdk(self) -> openai.AsyncOpenAI:
        """The official SDK on this gateway, without its own retries (the tests count calls)."""
        return openai.AsyncOpenAI(base_url=f"{self.api.url}/v1", api_key=self.token, max_retries=0)

    def held(self) -> int:
        """Calls whose prompt the API's hub still holds."""
        return len(self.api.app.state.runtime.invoke.hub)


def _settings(
    settings: Settings, dev: TemporalDevServer, bound: float, overlap: float, lead: int
) -> Settings:
    return on_own_temporal(
        settings,
        dev,
        "tfault",
        invoke_start_wait_seconds=bound,
        invoke_start_overlap_seconds=overlap,
        invoke_answers_ahead=lead,
        # A call held by the upstream (a hang, a stall) outlasts the start's bound here.
        invoke_first_byte_timeout_seconds=60.0,
        invoke_first_token_timeout_seconds=60.0,
        invoke_stream_idle_timeout_seconds=60.0,
    )


@pytest.fixture
async def stack(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    token_for: TokenFactory,
    tenant: str,
    upstream: UpstreamServer,
) -> AsyncIterator[Stack]:
    """A gateway on a Temporal dev server of its own; the start's bound, the overlap window and
    (third, 0 when left out) the lead of answers over their starts come from the test's param.
    Most tests here watch an answer wait for its start, so they run with no lead."""
    bound, overlap, *lead = request.param
    async with own_temporal(tmp_path) as dev:
        own = _settings(settings, dev, bound, overlap, lead[0] if lead else 0)
        async with workers(own, sessions) as client, serve(own) as api:
            token = await token_for(tenant)
            auth = {"Authorization": f"Bearer {token}"}
            async with httpx.AsyncClient(base_url=api.url, timeout=30) as http:
                await approved_profile(
                    http,
                    auth,
                    client,
                    tenant,
                    PROFILE,
                    {
                        "tf/sim": {
                            "provider": "openai",
                            "endpointRef": upstream.endpoint_ref,
                            "model": MODEL,
                        }
                    },
                )
            yield Stack(dev, api, auth, token, bound, client)


async def _completed(sessions: async_sessionmaker[AsyncSession], tenant: str, key: str) -> bool:
    async with sessions() as session:
        row = await by_key(session, tenant, key)
    return row is not None and row.ended_at is not None and row.outcome == "Completed"


async def _closed(sessions: async_sessionmaker[AsyncSession], tenant: str, key: str) -> None:
    """The key's receipt is closed Completed, within a deadline."""
    await eventually(lambda: _completed(sessions, tenant, key), timeout=30)


async def _answered_then_paused(
    stack: Stack, sdk: openai.AsyncOpenAI, upstream: UpstreamServer, fault: Fault | None
) -> int:
    """One call answered (a start just accepted), `fault` set at the upstream for the next, and
    Temporal paused: the next start is sent, and not answered until the server resumes. The
    upstream's count of calls before the next one."""
    await sdk.chat.completions.create(model=PROFILE, messages=[{"role": "user", "content": "a"}])
    if fault is not None:
        upstream.inject(MODEL, fault)
    before = upstream.requests(MODEL)
    stack.dev.pause()
    return before


async def _refused_with_nothing_called(
    sdk: openai.AsyncOpenAI, upstream: UpstreamServer, before: int
) -> None:
    """Temporal is now known unreachable: the next call is refused, and the upstream saw only
    the one call after `before`."""
    with pytest.raises(openai.APIStatusError) as again:
        await sdk.chat.completions.create(
            model=PROFILE, messages=[{"role": "user", "content": "after"}]
        )
    assert again.value.status_code == 503
    assert upstream.requests(MODEL) == before + 1


async def _sent_while_paused(
    stack: Stack,
    sdk: openai.AsyncOpenAI,
    upstream: UpstreamServer,
    key: str,
    fault: Fault | None = None,
) -> tuple[asyncio.Task[ChatCompletion], int]:
    """One call answered (a start just accepted), then Temporal paused and a keyed call sent
    (meeting `fault` at the upstream): returned once the upstream has that call, its start
    still unanswered; with the upstream's count before it."""
    before = await _answered_then_paused(stack, sdk, upstream, fault)
    call = asyncio.create_task(
        sdk.chat.completions.create(
            model=PROFILE,
            messages=[{"role": "user", "content": "alongside"}],
            extra_headers={"Idempotency-Key": key},
        )
    )
    await eventually(lambda: upstream.requests(MODEL) > before, timeout=30)
    return call, before


async def _ready(stack: Stack) -> None:
    """Temporal back on the same port, and the gateway ready on it again."""
    stack.dev.start()
    await stack.dev.wait_serving()

    async def ready() -> bool:
        async with httpx.AsyncClient(base_url=stack.api.url, timeout=30) as http:
            return (await http.get("/readyz")).status_code == 200

    await eventually(ready, timeout=60, interval=0.2)


def _chat(key: str) -> tuple[dict[str, object], dict[str, str]]:
    return (
        {"model": PROFILE, "messages": [{"role": "user", "content": "hello"}]},
        {"Idempotency-Key": key},
    )


# No overlap window: every call waits for its start, so none reaches the provider.
@pytest.mark.parametrize("stack", [(2.0, 0.0)], indirect=True)
async def test_temporal_down_is_a_503_with_retry_after_then_at_once_until_it_answers(
    stack: Stack, tenant: str, sessions: async_sessionmaker[AsyncSession], upstream: UpstreamServer
) -> None:
    sdk = stack.sdk()
    ok = await sdk.chat.completions.create(
        model=PROFILE, messages=[{"role": "user", "content": "before"}]
    )
    assert ok.choices[0].message.content
    refused_before = metrics.refusals.value({"reason": "temporal-unreachable"})
    called_before = upstream.requests(MODEL)

    stack.dev.kill()
    keys = [f"tf-{uuid.uuid4().hex[:8]}" for _ in range(3)]
    # One keep-alive connection for every call: a refusal must not drop it.
    async with httpx.AsyncClient(
        base_url=stack.api.url, timeout=60, limits=httpx.Limits(max_connections=1)
    ) as http:
        took: list[float] = []
        answers: list[httpx.Response] = []
        for key in keys:
            body, headers = _chat(key)
            started = time.monotonic()
            answers.append(
                await http.post(
                    "/v1/chat/completions", json=body, headers={**stack.auth, **headers}
                )
            )
            took.append(time.monotonic() - started)
        for resp in answers:
            assert resp.status_code == 503, resp.text
            assert resp.headers["content-type"].startswith("application/problem+json")
            assert int(resp.headers["retry-after"]) >= 1
            assert resp.headers.get("connection", "").lower() != "close"
            problem = resp.json()
            assert problem["type"].endswith("/temporal-unavailable")
            assert problem["reason"] == "temporal-unreachable"
        # The first waited for the start at most the bound (plus the way there and back); the
        # later ones did not wait it out again.
        assert took[0] < stack.bound + 5
        assert all(t < stack.bound for t in took[1:]), took
        readiness = await http.get("/readyz")
        assert readiness.status_code == 503 and readiness.json()["checks"]["temporal"] is False

    # Nothing called, nothing claimed, nothing kept: no receipt, and the hub holds no prompt.
    assert upstream.requests(MODEL) == called_before
    async with sessions() as session:
        for key in keys:
            assert await by_key(session, tenant, key) is None
    assert stack.held() == 0
    assert metrics.refusals.value({"reason": "temporal-unreachable"}) >= refused_before + 3

    await _ready(stack)

    async def answers_again() -> bool:
        try:
            done = await sdk.chat.completions.create(
                model=PROFILE,
                messages=[{"role": "user", "content": "after"}],
                extra_headers={"Idempotency-Key": f"tf-after-{uuid.uuid4().hex[:8]}"},
            )
        except openai.APIStatusError as exc:
            assert exc.status_code == 503, exc  # refused while the workers reconnect
            return False
        return bool(done.choices[0].message.content)

    await eventually(answers_again, timeout=60, interval=0.5)
    assert stack.held() == 0
    await sdk.close()


@pytest.mark.parametrize("stack", [(2.0, 0.0)], indirect=True)
async def test_a_retry_of_an_answered_key_is_replayed_while_temporal_is_down(
    stack: Stack, upstream: UpstreamServer
) -> None:
    sdk = stack.sdk()
    key = f"tf-replay-{uuid.uuid4().hex[:8]}"
    done = await _retried(sdk, key)
    streamed_key = f"tf-replay-st-{uuid.uuid4().hex[:8]}"
    streamed = await _streamed_text(sdk, streamed_key)
    called = upstream.requests(MODEL)

    stack.dev.kill()
    # Before the gateway knows, and once it does (a new key refused): the answered keys replay
    # from the store, with no workflow and no provider call.
    assert (await _retried(sdk, key)).choices[0].message.content == done.choices[0].message.content
    with pytest.raises(openai.APIStatusError) as refused:
        await _retried(sdk, f"tf-new-{uuid.uuid4().hex[:8]}")
    assert refused.value.status_code == 503
    assert refused.value.response.headers["retry-after"]
    again = await _retried(sdk, key)
    assert again.choices[0].message.content == done.choices[0].message.content
    assert await _streamed_text(sdk, streamed_key) == streamed
    assert upstream.requests(MODEL) == called
    await sdk.close()


async def _streamed_text(sdk: openai.AsyncOpenAI, key: str) -> str:
    stream = await sdk.chat.completions.create(
        model=PROFILE,
        messages=[{"role": "user", "content": "streamed"}],
        stream=True,
        extra_headers={"Idempotency-Key": key},
    )
    text = [c.choices[0].delta.content or "" async for c in stream if c.choices]
    assert "".join(text)
    return "".join(text)


@pytest.mark.parametrize("stack", [(30.0, 0.25)], indirect=True)
async def test_a_temporal_restart_shorter_than_the_bound_is_absorbed(
    stack: Stack, sessions: async_sessionmaker[AsyncSession], tenant: str
) -> None:
    sdk = stack.sdk()
    stack.dev.kill()
    key = f"tf-blip-{uuid.uuid4().hex[:8]}"
    call = asyncio.create_task(
        sdk.chat.completions.create(
            model=PROFILE,
            messages=[{"role": "user", "content": "during"}],
            extra_headers={"Idempotency-Key": key},
        )
    )
    stack.dev.start()
    done = await asyncio.wait_for(call, timeout=stack.bound + 30)
    assert done.choices[0].message.content

    await _closed(sessions, tenant, key)
    assert stack.held() == 0
    await sdk.close()


# A wide overlap window, so that the call after the first one overlaps its start however slow
# the machine is between the two.
@pytest.mark.parametrize("stack", [(30.0, 60.0)], indirect=True)
async def test_just_after_a_start_the_provider_call_runs_alongside_the_next_start(
    stack: Stack, sessions: async_sessionmaker[AsyncSession], tenant: str, upstream: UpstreamServer
) -> None:
    sdk = stack.sdk()
    key = f"tf-overlap-{uuid.uuid4().hex[:8]}"
    try:
        # The provider answers while the start is still unanswered ...
        call, before = await _sent_while_paused(stack, sdk, upstream, key)
        # ... its receipt closes as the call ends, but the answer waits for the start.
        await _closed(sessions, tenant, key)
        assert not call.done()
    finally:
        stack.dev.resume()
    done = await asyncio.wait_for(call, timeout=stack.bound + 30)
    assert done.choices[0].message.content
    assert upstream.requests(MODEL) == before + 1

    await _closed(sessions, tenant, key)
    assert stack.held() == 0
    await sdk.close()


# The bound leaves the call seconds to end and close its receipt before the start fails.
@pytest.mark.parametrize("stack", [(5.0, 60.0)], indirect=True)
async def test_a_start_that_fails_after_its_call_ended_keeps_the_receipt_and_answers(
    stack: Stack, sessions: async_sessionmaker[AsyncSession], tenant: str, upstream: UpstreamServer
) -> None:
    sdk = stack.sdk()
    key = f"tf-kept-{uuid.uuid4().hex[:8]}"
    call, before = await _sent_while_paused(stack, sdk, upstream, key)
    await _closed(sessions, tenant, key)
    stack.dev.kill()  # the start is never answered: the bound runs out
    # The provider answered and the receipt records it: the caller gets that answer.
    done = await asyncio.wait_for(call, timeout=stack.bound + 30)
    assert done.choices[0].message.content
    async with sessions() as session:
        row = await by_key(session, tenant, key)
    assert row is not None and row.outcome == "Completed" and row.usage_status == "Reported"
    assert row.output_tokens
    assert stack.held() == 0
    await _refused_with_nothing_called(sdk, upstream, before)
    # Once Temporal is back, a retry of the key replays the answer: one provider call per key,
    # though the key's workflow never started.
    await _ready(stack)
    replayed = await _retried(sdk, key)
    assert replayed.choices[0].message.content == done.choices[0].message.content
    assert upstream.requests(MODEL) == before + 1
    await sdk.close()


async def _ended_with_its_close_refused(
    stack: Stack, sdk: openai.AsyncOpenAI, upstream: UpstreamServer, store: RefusedClose, key: str
) -> tuple[asyncio.Task[ChatCompletion], int]:
    """`_sent_while_paused`, returned once the call has ended and the store refused its close."""
    call, before = await _sent_while_paused(stack, sdk, upstream, key)
    await eventually(store.refused, timeout=30)
    return call, before


async def _outage_over(
    stack: Stack, sdk: openai.AsyncOpenAI, upstream: UpstreamServer, before: int
) -> None:
    """No prompt held, the next call refused with nothing called; then Temporal back."""
    assert stack.held() == 0
    await _refused_with_nothing_called(sdk, upstream, before)
    await _ready(stack)


def _retried(sdk: openai.AsyncOpenAI, key: str) -> Awaitable[ChatCompletion]:
    return sdk.chat.completions.create(
        model=PROFILE,
        messages=[{"role": "user", "content": "alongside"}],
        extra_headers={"Idempotency-Key": key},
    )


async def _kept_then_replayed(
    stack: Stack,
    sdk: openai.AsyncOpenAI,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    upstream: UpstreamServer,
    key: str,
    done: ChatCompletion,
    before: int,
) -> None:
    """The key's receipt is closed Completed, usage Reported; once the outage is over, a retry
    of the key replays the answer its caller got, with no second provider call."""
    async with sessions() as session:
        row = await by_key(session, tenant, key)
    assert row is not None and row.outcome == "Completed" and row.usage_status == "Reported"
    await _outage_over(stack, sdk, upstream, before)
    replayed = await _retried(sdk, key)
    assert replayed.choices[0].message.content == done.choices[0].message.content
    assert upstream.requests(MODEL) == before + 1


@pytest.mark.parametrize("stack", [(5.0, 60.0)], indirect=True)
async def test_a_call_whose_close_was_refused_keeps_its_claim_and_is_answered_once_closed_late(
    stack: Stack, sessions: async_sessionmaker[AsyncSession], tenant: str, upstream: UpstreamServer
) -> None:
    sdk = stack.sdk()
    key = f"tf-late-{uuid.uuid4().hex[:8]}"
    async with refused_close(sessions, key) as store:
        call, before = await _ended_with_its_close_refused(stack, sdk, upstream, store, key)
        await store.lift()  # the store answers again before the start fails
        stack.dev.kill()  # the start is never answered: the bound runs out
        done = await asyncio.wait_for(call, timeout=stack.bound + 30)
    # Closed late: the caller gets the answer its receipt records.
    assert done.choices[0].message.content
    await _kept_then_replayed(stack, sdk, sessions, tenant, upstream, key, done, before)
    await sdk.close()


def _open_for(started_at: datetime) -> float:
    return (datetime.now(UTC) - started_at).total_seconds()


@pytest.mark.parametrize("stack", [(5.0, 60.0)], indirect=True)
async def test_a_call_whose_close_stays_refused_keeps_its_claim_and_is_never_called_again(
    stack: Stack, sessions: async_sessionmaker[AsyncSession], tenant: str, upstream: UpstreamServer
) -> None:
    sdk = stack.sdk()
    key = f"tf-owed-{uuid.uuid4().hex[:8]}"
    async with refused_close(sessions, key) as store:
        call, before = await _ended_with_its_close_refused(stack, sdk, upstream, store, key)
        stack.dev.kill()  # the start fails while the store still refuses the close
        with pytest.raises(openai.APIStatusError) as refused:
            await asyncio.wait_for(call, timeout=stack.bound + 30)
        assert refused.value.status_code == 503
        # The provider answered and was paid: the claim stays (open, for the sweeper) rather
        # than being undone, which would let a retry of the key call the provider again.
        async with sessions() as session:
            row = await by_key(session, tenant, key)
        assert row is not None and row.ended_at is None
    await _outage_over(stack, sdk, upstream, before)
    open_before = _open_for(row.started_at)
    with receipt_reads(key) as reads, pytest.raises(openai.APIStatusError) as again:
        await _retried(sdk, key)
    open_after = _open_for(row.started_at)
    # Not finished, and nothing but the sweeper will close it (no workflow, past the start's
    # bound): the caller is told at once, with no reads spent waiting, to come back when the
    # sweeper may have closed it, however long the outage above took.
    assert reads.seen <= 2
    assert again.value.status_code == 503
    told = int(again.value.response.headers["retry-after"])
    bound = unstarted_bound(stack.bound)
    assert max(2, math.ceil(bound - open_after)) <= told <= max(2, math.ceil(bound - open_before))
    assert again.value.response.json()["type"].endswith("/invocation-in-progress")
    assert upstream.requests(MODEL) == before + 1
    await sdk.close()


@pytest.mark.parametrize("stack", [(2.0, 60.0)], indirect=True)
async def test_a_start_that_fails_while_its_call_runs_cancels_it_and_undoes_the_claim(
    stack: Stack, sessions: async_sessionmaker[AsyncSession], tenant: str, upstream: UpstreamServer
) -> None:
    sdk = stack.sdk()
    key = f"tf-lost-{uuid.uuid4().hex[:8]}"
    hang = Fault(kind=FaultKind.HANG, times=1)  # the upstream holds the call: it never ends
    call, before = await _sent_while_paused(stack, sdk, upstream, key, hang)
    stack.dev.kill()  # the start is never answered: the bound runs out
    with pytest.raises(openai.APIStatusError) as refused:
        await asyncio.wait_for(call, timeout=stack.bound + 30)
    assert refused.value.status_code == 503
    assert int(refused.value.response.headers["retry-after"]) >= 1
    assert refused.value.response.json()["reason"] == "temporal-unreachable"
    # The call was stopped before it ended and its claim undone: the key stays unused.
    async with sessions() as session:
        assert await by_key(session, tenant, key) is None
    assert stack.held() == 0
    await _refused_with_nothing_called(sdk, upstream, before)
    await sdk.close()


async def _workflow_completed(
    stack: Stack, sessions: async_sessionmaker[AsyncSession], tenant: str, key: str
) -> bool:
    async with sessions() as session:
        row = await by_key(session, tenant, key)
    assert row is not None
    handle = stack.client.get_workflow_handle(invoke_workflow_id(tenant, row.invocation_id))
    return (await handle.describe()).status == WorkflowExecutionStatus.COMPLETED


# A lead of one answer over the process's unanswered starts.
@pytest.mark.parametrize("stack", [(30.0, 60.0, 1)], indirect=True)
async def test_within_the_lead_an_answer_goes_before_its_start_is_in_and_past_it_waits(
    stack: Stack, sessions: async_sessionmaker[AsyncSession], tenant: str, upstream: UpstreamServer
) -> None:
    sdk = stack.sdk()
    first, second = (f"tf-ahead-{n}-{uuid.uuid4().hex[:8]}" for n in (1, 2))
    try:
        call, before = await _sent_while_paused(stack, sdk, upstream, first)
        # A place in the lead: the answer comes while the server is still paused, well before
        # its start's 30 s bound (without the lead it would come only then), its receipt
        # closed before it.
        done = await asyncio.wait_for(call, timeout=stack.bound - 10)
        assert done.choices[0].message.content
        assert await _completed(sessions, tenant, first)
        # That place is held until the first start is answered: the next answer waits for its
        # own start, its receipt closed meanwhile.
        later = asyncio.ensure_future(_retried(sdk, second))
        await _closed(sessions, tenant, second)
        finished, _ = await asyncio.wait({later}, timeout=1.0)  # a window for what must not come
        assert not finished
    finally:
        stack.dev.resume()
    assert (await asyncio.wait_for(later, timeout=UNBOUNDED)).choices[0].message.content
    # With the server back, both workflows run and complete: no invocation without its workflow.
    for key in (first, second):
        await eventually(partial(_workflow_completed, stack, sessions, tenant, key), timeout=30)
    assert upstream.requests(MODEL) == before + 2
    await eventually(lambda: stack.held() == 0, timeout=30)
    await sdk.close()


@pytest.mark.parametrize("stack", [(10.0, 60.0, 1)], indirect=True)
async def test_a_start_that_fails_after_its_answer_went_ahead_leaves_the_receipt_closed(
    stack: Stack, sessions: async_sessionmaker[AsyncSession], tenant: str, upstream: UpstreamServer
) -> None:
    sdk = stack.sdk()
    key = f"tf-ahead-lost-{uuid.uuid4().hex[:8]}"
    call, before = await _sent_while_paused(stack, sdk, upstream, key)
    # Answered ahead of its start, while the server is paused: without the lead the answer
    # would come only once the start had failed, its bound (sent moments ago) run out.
    done = await asyncio.wait_for(call, timeout=stack.bound - 2)
    stack.dev.kill()  # the start is never answered: the bound runs out

    async def unready() -> bool:
        async with httpx.AsyncClient(base_url=stack.api.url, timeout=30) as http:
            return (await http.get("/readyz")).status_code == 503

    await eventually(unready, timeout=stack.bound + 30, interval=0.2)
    # The process itself is fit to serve: a load balancer asking `/readyz/process` keeps it,
    # so callers meet its own prompt 503 with Retry-After, and keyed retries its replays,
    # where `/readyz` took every process out at once for an outage all of them share.
    async with httpx.AsyncClient(base_url=stack.api.url, timeout=30) as http:
        process = await http.get("/readyz/process")
    assert process.status_code == 200, process.text
    assert process.json()["checks"] == {"schema": True, "started": True}
    # The failed start changed nothing the caller was told: the receipt stays closed, as for a
    # call that ended before its start failed, and the key replays it.
    await _kept_then_replayed(stack, sdk, sessions, tenant, upstream, key, done, before)
    await sdk.close()


async def _first_text(stream: AsyncStream[ChatCompletionChunk]) -> str:
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            return chunk.choices[0].delta.content
    raise AssertionError("the stream ended without output")


async def _drain(stream: AsyncStream[ChatCompletionChunk]) -> None:
    async for _ in stream:
        pass


async def _stream_while_paused(
    stack: Stack,
    sdk: openai.AsyncOpenAI,
    upstream: UpstreamServer,
    key: str,
    fault: Fault | None = None,
) -> tuple[AsyncStream[ChatCompletionChunk], str, int]:
    """One call answered (a start just accepted), then Temporal paused and a keyed stream sent
    (meeting `fault` at the upstream): returned with its first output, which came while its
    start was unanswered (before this change the response waited for the start: a caller saw
    nothing until the server resumed)."""
    before = await _answered_then_paused(stack, sdk, upstream, fault)
    stream = await asyncio.wait_for(
        sdk.chat.completions.create(
            model=PROFILE,
            messages=[{"role": "user", "content": "alongside"}],
            stream=True,
            extra_headers={"Idempotency-Key": key},
        ),
        timeout=15,
    )
    text = await asyncio.wait_for(_first_text(stream), timeout=15)
    return stream, text, before


@pytest.mark.parametrize("stack", [(30.0, 60.0)], indirect=True)
async def test_a_stream_begun_alongside_its_start_sends_output_before_the_start_is_in(
    stack: Stack, sessions: async_sessionmaker[AsyncSession], tenant: str, upstream: UpstreamServer
) -> None:
    sdk = stack.sdk()
    key = f"tf-stream-{uuid.uuid4().hex[:8]}"
    try:
        stream, text, before = await _stream_while_paused(stack, sdk, upstream, key)
        assert text
        # The caller has output and the receipt closes as the call ends; the stream's end
        # waits for the start.
        drained = asyncio.create_task(_drain(stream))
        await _closed(sessions, tenant, key)
        assert not drained.done()
    finally:
        stack.dev.resume()
    await asyncio.wait_for(drained, timeout=stack.bound + 30)
    assert upstream.requests(MODEL) == before + 1
    assert stack.held() == 0
    await sdk.close()


@pytest.mark.parametrize("stack", [(2.0, 60.0)], indirect=True)
async def test_a_start_that_fails_once_a_streams_output_began_ends_it_with_an_error_event(
    stack: Stack, sessions: async_sessionmaker[AsyncSession], tenant: str, upstream: UpstreamServer
) -> None:
    sdk = stack.sdk()
    key = f"tf-stream-lost-{uuid.uuid4().hex[:8]}"
    stall = Fault(kind=FaultKind.STREAM_STALL, after_chunks=3, times=1)  # output, then silence
    stream, _, before = await _stream_while_paused(stack, sdk, upstream, key, stall)
    stack.dev.kill()  # the start is never answered: the bound runs out
    with pytest.raises(openai.APIError) as ended:
        await asyncio.wait_for(_drain(stream), timeout=stack.bound + 30)
    error = ended.value.body
    assert isinstance(error, dict)
    # As the same failure before output is answered: `server_error`, the kind as the code.
    assert (error["type"], error["code"]) == ("server_error", "temporal_unavailable"), error
    assert error["errorClass"] == "transient"
    assert error["closeReason"] == "unavailable"
    # The call was stopped and its claim undone, as when nothing had been sent: no receipt, the
    # key unused, nothing left in memory.
    async with sessions() as session:
        assert await by_key(session, tenant, key) is None
    assert stack.held() == 0
    await _refused_with_nothing_called(sdk, upstream, before)
    await sdk.close()


@pytest.mark.parametrize("stack", [(2.0, 60.0)], indirect=True)
async def test_the_gateway_stream_ends_without_a_receipt_when_its_start_fails_under_way(
    stack: Stack, sessions: async_sessionmaker[AsyncSession], tenant: str, upstream: UpstreamServer
) -> None:
    # The gateway's own stream reads its receipt back for the final event: here there is none.
    key = f"tf-gw-lost-{uuid.uuid4().hex[:8]}"
    chat = {"messages": [{"role": "user", "content": "alongside"}]}
    async with httpx.AsyncClient(base_url=stack.api.url, timeout=30) as http:
        warm = await http.post(
            "/gateway/invoke", headers=stack.auth, json={"profileId": PROFILE, "request": chat}
        )
        assert warm.status_code == 200  # a start accepted just now
        upstream.inject(MODEL, Fault(kind=FaultKind.STREAM_STALL, after_chunks=3, times=1))
        before = upstream.requests(MODEL)
        stack.dev.pause()
        body = {"profileId": PROFILE, "stream": True, "idempotencyKey": key, "request": chat}
        async with http.stream("POST", "/gateway/invoke", headers=stack.auth, json=body) as gw:
            lines = gw.aiter_lines()
            async with asyncio.timeout(15):
                async for line in lines:
                    if line == "event: text_delta":
                        break
            stack.dev.kill()
            async with asyncio.timeout(stack.bound + 30):
                rest = [line async for line in lines]
    error = json.loads(rest[rest.index("event: error") + 1].removeprefix("data: "))
    assert error["errorKind"] == "temporal_unavailable" and error["errorClass"] == "transient"
    assert error["receiptKept"] is False
    async with sessions() as session:
        assert await by_key(session, tenant, key) is None
    assert stack.held() == 0
    assert upstream.requests(MODEL) == before + 1


# The bound leaves the call seconds to end and close its receipt before the start fails.
@pytest.mark.parametrize("stack", [(5.0, 60.0)], indirect=True)
async def test_a_stream_that_ended_before_its_start_failed_ends_with_its_receipt(
    stack: Stack, sessions: async_sessionmaker[AsyncSession], tenant: str, upstream: UpstreamServer
) -> None:
    sdk = stack.sdk()
    key = f"tf-stream-kept-{uuid.uuid4().hex[:8]}"
    stream, text, before = await _stream_while_paused(stack, sdk, upstream, key)
    drained = asyncio.create_task(_drain(stream))
    await _closed(sessions, tenant, key)
    stack.dev.kill()  # the start is never answered: the bound runs out
    # The whole answer was streamed and its receipt closed: the stream ends as it would have.
    await asyncio.wait_for(drained, timeout=stack.bound + 30)
    assert text
    assert upstream.requests(MODEL) == before + 1
    assert stack.held() == 0
    await sdk.close()
