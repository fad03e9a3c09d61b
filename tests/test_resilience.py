"""Resilience on the invoke path against the local upstream's faults: what the caller gets,
how many requests each deployment saw, how long it took, and what the receipt says."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col, select
from temporalio.client import Client

from core import metrics
from core.settings import Settings
from providers.upstream import Fault, FaultKind, UpstreamServer
from store.receipts import by_key
from store.tables import InvocationReceiptRow, OutboxEventRow
from tests.conftest import TokenFactory
from tests.helpers.catalog import approved_deployment, profile_event, publish
from tests.helpers.deadline import eventually
from tests.helpers.surfaces import receipt as _receipt

A, B = "rs-primary", "rs-second"  # upstream models of the two deployments
LONG = " ".join(f"word{i}" for i in range(40))


@pytest.fixture
async def auth(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
) -> dict[str, str]:
    upstream.state.clear_faults()
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    for dep, model, window in (("rs/a", A, 150_000), ("rs/b", B, 200_000)):
        await approved_deployment(
            http,
            auth,
            temporal_client,
            tenant,
            dep,
            model=model,
            endpointRef=upstream.endpoint_ref,
            contextWindowTokens=window,
        )
    solo = profile_event("rs-solo", ["rs/a"])
    assert (await publish(http, auth, solo)).status_code == 200
    fb = profile_event("rs-fb", ["rs/a", "rs/b"], fallbackEnabled=True, fallbackChain=["rs-solo"])
    assert (await publish(http, auth, fb)).status_code == 200
    # A profile whose only candidate is rs/a, falling back to another profile's (rs/b).
    only_b = profile_event("rs-only-b", ["rs/b"])
    assert (await publish(http, auth, only_b)).status_code == 200
    chain = profile_event("rs-chain", ["rs/a"], fallbackEnabled=True, fallbackChain=["rs-only-b"])
    assert (await publish(http, auth, chain)).status_code == 200
    # Two candidates, no fallback between them: only rs/a is ever called.
    nofb = profile_event("rs-nofb", ["rs/a", "rs/b"], fallbackEnabled=False)
    assert (await publish(http, auth, nofb)).status_code == 200
    return auth


async def _call(
    http: httpx.AsyncClient, auth: dict[str, str], profile: str, text: str = "hello"
) -> tuple[httpx.Response, str, float]:
    key = f"rs-{uuid.uuid4().hex}"
    began = time.monotonic()
    resp = await http.post(
        "/v1/chat/completions",
        headers={**auth, "Idempotency-Key": key},
        json={"model": profile, "messages": [{"role": "user", "content": text}]},
    )
    return resp, key, time.monotonic() - began


async def _stream(
    http: httpx.AsyncClient, auth: dict[str, str], profile: str
) -> tuple[list[Any], str, float]:
    key = f"rs-{uuid.uuid4().hex}"
    began = time.monotonic()
    events: list[Any] = []
    async with http.stream(
        "POST",
        "/v1/chat/completions",
        headers={**auth, "Idempotency-Key": key},
        json={"model": profile, "stream": True, "messages": [{"role": "user", "content": LONG}]},
    ) as resp:
        async for line in resp.aiter_lines():
            if line.startswith("data: "):
                data = line.removeprefix("data: ")
                events.append(data if data == "[DONE]" else json.loads(data))
    return events, key, time.monotonic() - began


class Seen:
    def __init__(self, upstream: UpstreamServer) -> None:
        self.up, self.a, self.b = upstream, upstream.requests(A), upstream.requests(B)

    def __call__(self) -> tuple[int, int]:
        return self.up.requests(A) - self.a, self.up.requests(B) - self.b


Ctx = tuple[
    httpx.AsyncClient, dict[str, str], UpstreamServer, async_sessionmaker[AsyncSession], str
]


@pytest.fixture
def attempt_bound(settings: Settings) -> float:
    """Seconds: the attempt's whole bound, which the test settings leave at its default."""
    return settings.invoke_attempt_timeout_seconds


@pytest.fixture
def ctx(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
) -> Ctx:
    return http, auth, upstream, sessions, tenant


async def test_rate_limits_and_a_500_are_retried_on_the_same_deployment(ctx: Ctx) -> None:
    http, auth, up, sessions, tenant = ctx
    up.inject(A, Fault(kind=FaultKind.RATE_LIMIT, retry_after=0.5, times=1))
    seen = Seen(up)
    resp, key, took = await _call(http, auth, "rs-solo")
    assert resp.status_code == 200 and seen() == (2, 0)
    assert took >= 0.5  # the Retry-After was waited (once: the count above)
    row = await _receipt(sessions, tenant, key)
    assert (row.outcome, row.deployment_id, row.fallback_used) == ("Completed", "rs/a", False)

    up.inject(A, Fault(kind=FaultKind.RATE_LIMIT, times=2))  # no Retry-After: backoff
    seen = Seen(up)
    resp, key, _ = await _call(http, auth, "rs-solo")
    assert resp.status_code == 200 and seen() == (3, 0)

    up.inject(A, Fault(kind=FaultKind.SERVER_ERROR, times=1))
    seen = Seen(up)
    resp, key, _ = await _call(http, auth, "rs-solo")
    assert resp.status_code == 200 and seen() == (2, 0)
    assert (await _receipt(sessions, tenant, key)).outcome == "Completed"


async def test_persistent_503_fails_transient_or_falls_back(ctx: Ctx) -> None:
    http, auth, up, sessions, tenant = ctx
    up.inject(A, Fault(kind=FaultKind.UNAVAILABLE))
    seen = Seen(up)
    resp, key, _ = await _call(http, auth, "rs-solo")
    assert resp.status_code == 503 and resp.headers["Retry-After"] and seen() == (3, 0)
    row = await _receipt(sessions, tenant, key)
    assert (row.outcome, row.usage_status) == ("Failed", "Unknown")
    assert row.input_tokens is None  # failed attempts are never billed

    # Three transient failures opened the primary's breaker: with no other candidate the
    # caller hears a transient error naming why, with when to come back; nothing was claimed
    # or called, so the key is still the caller's: sent again once the cool-down has passed,
    # it is answered (below). (Claimed, the key was spent, and that retry replayed the 503.)
    seen = Seen(up)
    key = f"rs-{uuid.uuid4().hex}"
    body = {"model": "rs-solo", "messages": [{"role": "user", "content": "hello"}]}
    keyed = {**auth, "Idempotency-Key": key}
    resp = await http.post("/v1/chat/completions", headers=keyed, json=body)
    assert resp.status_code == 503 and seen() == (0, 0)
    assert "circuit open for rs/a" in resp.json()["reason"]
    assert int(resp.headers["Retry-After"]) >= 1 and "x-should-retry" not in resp.headers
    async with sessions() as session:
        assert await by_key(session, tenant, key) is None

    before = metrics.fallbacks.value({"profile": "rs-fb", "reason": "circuit_open"})
    seen = Seen(up)
    resp, key, _ = await _call(http, auth, "rs-fb")
    assert resp.status_code == 200 and resp.headers["X-Model-Router-Deployment"] == "rs/b"
    assert seen() == (0, 1)
    row = await _receipt(sessions, tenant, key)
    assert (row.outcome, row.deployment_id, row.fallback_used) == ("Completed", "rs/b", True)
    assert metrics.fallbacks.value({"profile": "rs-fb", "reason": "circuit_open"}) == before + 1
    async with sessions() as s:
        event = (
            await s.scalars(
                select(OutboxEventRow)
                .where(col(OutboxEventRow.tenant_id) == tenant)
                .where(col(OutboxEventRow.event_type) == "ModelFallbackUsed")
            )
        ).one()
    assert event.payload == {
        "invocationId": str(row.invocation_id),
        "tenantId": tenant,
        "profileId": "rs-fb",
        "fromDeploymentId": "rs/a",
        "toDeploymentId": "rs/b",
        "reason": "circuit_open",
    }

    up.state.clear_faults(A)
    seen = Seen(up)

    async def answered() -> httpx.Response | None:
        again = await http.post("/v1/chat/completions", headers=keyed, json=body)
        return again if again.status_code == 200 else None

    await eventually(answered, timeout=20, interval=0.3)
    assert seen() == (1, 0)


async def test_a_breaker_refusal_before_the_claim_follows_the_fallback_rules(ctx: Ctx) -> None:
    """The refusal before the claim asked whether every target's breaker refused; with no
    fallback between them, a second target's closed breaker let the call be claimed, the
    route then called no one (the first's breaker open) and the key was spent on a 503."""
    http, auth, up, sessions, tenant = ctx
    up.inject(A, Fault(kind=FaultKind.UNAVAILABLE))
    try:
        resp, _, _ = await _call(http, auth, "rs-nofb")  # three 503s open rs/a's breaker
        assert resp.status_code == 503
        seen = Seen(up)
        resp, key, _ = await _call(http, auth, "rs-nofb")
        assert resp.status_code == 503 and seen() == (0, 0)
        assert "circuit open for rs/a" in resp.json()["reason"], resp.text
        async with sessions() as session:
            assert await by_key(session, tenant, key) is None  # the key is still the caller's
    finally:
        up.state.clear_faults(A)

    async def answered() -> bool:  # the breaker closed again, for the tests after this one
        resp, _, _ = await _call(http, auth, "rs-nofb")
        return resp.status_code == 200

    await eventually(answered, timeout=20, interval=0.3)


async def test_a_silent_provider_is_bounded_and_not_retried(ctx: Ctx) -> None:
    http, auth, up, sessions, tenant = ctx
    up.inject(A, Fault(kind=FaultKind.HANG))
    seen = Seen(up)
    resp, key, took = await _call(http, auth, "rs-solo")
    # Ended by the first token's bound (2 s here), the first of the attempt's bounds to run out:
    # a timeout, Chat Completions' 504.
    assert resp.status_code == 504 and seen() == (1, 0) and took >= 2.0
    assert "first token timeout" in resp.json()["reason"], resp.text
    assert (await _receipt(sessions, tenant, key)).usage_status == "Unknown"
    seen = Seen(up)
    resp, key, _ = await _call(http, auth, "rs-fb")
    assert resp.status_code == 200 and seen() == (1, 1)
    assert (await _receipt(sessions, tenant, key)).fallback_used


async def test_slow_first_token_within_and_past_the_bound(ctx: Ctx) -> None:
    http, auth, up, sessions, tenant = ctx
    up.inject(A, Fault(kind=FaultKind.SLOW_FIRST_TOKEN, delay=0.5, times=1))
    events, key, took = await _stream(http, auth, "rs-fb")
    assert events[-1] == "[DONE]" and took >= 0.5
    row = await _receipt(sessions, tenant, key)
    assert row.deployment_id == "rs/a" and (row.time_to_first_token_ms or 0) >= 500
    up.inject(A, Fault(kind=FaultKind.SLOW_FIRST_TOKEN, delay=5.0, times=1))
    seen = Seen(up)
    events, key, _ = await _stream(http, auth, "rs-fb")
    # The fallback answered: the primary's first token (5 s away) was not waited for.
    assert events[-1] == "[DONE]" and seen() == (1, 1)
    assert events[-2]["model_router"]["deploymentId"] == "rs/b"


@pytest.mark.parametrize("kind", [FaultKind.STREAM_CUT, FaultKind.STREAM_STALL])
async def test_a_stream_broken_after_output_ends_with_an_error_and_never_falls_back(
    ctx: Ctx, attempt_bound: float, kind: FaultKind
) -> None:
    http, auth, up, sessions, tenant = ctx
    up.inject(A, Fault(kind=kind, after_chunks=4, times=1))
    seen = Seen(up)
    events, key, took = await _stream(http, auth, "rs-fb")
    assert "[DONE]" not in events and "error" in events[-1]
    # A stall is ended by the idle bound, never the attempt bound.
    expected = {FaultKind.STREAM_CUT: "stream_incomplete", FaultKind.STREAM_STALL: "timeout"}
    # The kind as the code, as the whole answer's error gives it (its type: `server_error`).
    assert events[-1]["error"]["code"] == expected[kind] and took < attempt_bound
    assert any(e.get("choices") and e["choices"][0]["delta"].get("content") for e in events[:-1])
    assert seen() == (1, 0)  # the fallback never saw a request: no splice
    row = await _receipt(sessions, tenant, key)
    assert (row.outcome, row.usage_status) == ("Partial", "Unknown")
    assert (row.output_tokens or 0) > 0 and not row.fallback_used


async def test_a_complete_stream_without_its_terminator_is_finalised_promptly(
    ctx: Ctx, settings: Settings
) -> None:
    http, auth, up, sessions, tenant = ctx
    up.inject(A, Fault(kind=FaultKind.MISSING_TERMINATOR, times=1))
    seen = Seen(up)
    events, key, took = await _stream(http, auth, "rs-fb")
    assert events[-1] == "[DONE]" and seen() == (1, 0)
    # Ended at the provider's end of stream, not by waiting out the idle bound for a terminator.
    assert took < settings.invoke_stream_idle_timeout_seconds
    assert (await _receipt(sessions, tenant, key)).outcome == "Completed"


async def test_context_length_moves_to_a_larger_window_and_policy_stops(ctx: Ctx) -> None:
    http, auth, up, sessions, tenant = ctx
    up.inject(A, Fault(kind=FaultKind.CONTEXT_LENGTH, times=2))
    seen = Seen(up)
    resp, key, _ = await _call(http, auth, "rs-solo")
    assert resp.status_code == 400 and seen() == (1, 0)
    resp, key, _ = await _call(http, auth, "rs-fb")
    assert resp.status_code == 200 and seen() == (2, 1)
    row = await _receipt(sessions, tenant, key)
    assert (row.deployment_id, row.fallback_used) == ("rs/b", True)

    up.inject(A, Fault(kind=FaultKind.CONTENT_POLICY, times=1))
    seen = Seen(up)
    resp, key, _ = await _call(http, auth, "rs-fb")
    assert resp.status_code == 400 and seen() == (1, 0)
    body = resp.json()
    assert body["error"]["type"] == "content_policy" and body["reason"]
    assert (await _receipt(sessions, tenant, key)).outcome == "Failed"


async def test_breaker_serves_the_fallback_and_returns_within_seconds(
    ctx: Ctx, settings: Settings
) -> None:
    http, auth, up, _, _ = ctx
    up.inject(A, Fault(kind=FaultKind.UNAVAILABLE))
    seen = Seen(up)
    started = time.monotonic()  # no later than the breaker opened
    resp, _, _ = await _call(http, auth, "rs-fb")
    assert resp.headers["X-Model-Router-Deployment"] == "rs/b" and seen() == (3, 1)
    for _ in range(3):  # open: the primary is not asked, but for one trial per cool-down
        resp, _, _ = await _call(http, auth, "rs-fb")
        assert resp.headers["X-Model-Router-Deployment"] == "rs/b"
    # On a quick machine these calls fit inside the first cool-down (1 s) and no trial is due;
    # a slow one may pass a cool-down or more, each allowing one trial. Either way no more.
    cool_downs = (time.monotonic() - started) // settings.invoke_breaker_cooldown_seconds
    assert seen()[0] - 3 <= cool_downs
    up.state.clear_faults(A)
    healed = time.monotonic()
    served: list[str] = []
    # Back at the first trial, one cool-down (1 s here) after the breaker opened. No probe runs
    # in tests (the schedule's is every two minutes), so only the trial can bring it back.
    while time.monotonic() - healed < 30:
        resp, _, _ = await _call(http, auth, "rs-fb")
        served.append(resp.headers["X-Model-Router-Deployment"])
        if served[-1] == "rs/a":
            break
    print(f"breaker trial: rs/a served {time.monotonic() - healed:.2f}s after it healed")
    assert served[-1] == "rs/a"


async def test_the_profile_fallback_chain_answers_with_the_same_guarantees(ctx: Ctx) -> None:
    http, auth, up, sessions, tenant = ctx
    up.inject(A, Fault(kind=FaultKind.SERVER_ERROR))
    seen = Seen(up)
    resp, key, _ = await _call(http, auth, "rs-chain")
    assert resp.status_code == 200 and seen() == (3, 1)
    row = await _receipt(sessions, tenant, key)
    assert (row.deployment_id, row.fallback_used) == ("rs/b", True)
    # With a pinned plan (a run), the same chain is used against the plan's constraints.
    resp = await http.post(
        "/v1/chat/completions",
        headers={**auth, "X-Run-Id": str(uuid.uuid4())},
        json={"model": "rs-chain", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert resp.status_code == 200 and resp.headers["X-Model-Router-Deployment"] == "rs/b"


async def test_sustained_failure_goes_degraded_and_recovers_within_seconds_of_healing(
    ctx: Ctx,
) -> None:
    http, auth, up, sessions, tenant = ctx
    up.inject(A, Fault(kind=FaultKind.UNAVAILABLE))
    seen = Seen(up)
    calls = 1
    resp, _, _ = await _call(http, auth, "rs-fb")  # three attempts open the breaker
    assert resp.headers["X-Model-Router-Deployment"] == "rs/b" and seen()[0] == 3
    # After the cool-down a single trial goes to the primary; it fails: sustained failure.
    deadline = time.monotonic() + 10
    while seen()[0] == 3 and time.monotonic() < deadline:
        resp, _, _ = await _call(http, auth, "rs-fb")
        calls += 1
        assert resp.status_code == 200  # served by the fallback all along
    assert seen()[0] == 4

    async def state() -> tuple[str, bool]:
        got = (await http.get("/factory/model-deployments/rs/a", headers=auth)).json()
        return got["state"], got["healthy"]

    async def degraded() -> bool:
        return await state() == ("Degraded", False)

    await eventually(degraded, timeout=15)
    # Degraded is skipped by the router: the fallback answers, and a profile with no other
    # candidate is told to come back at this process's next recovery trial (one cool-down).
    resp, _, _ = await _call(http, auth, "rs-fb")
    assert resp.headers["X-Model-Router-Deployment"] == "rs/b"
    resp, _, _ = await _call(http, auth, "rs-solo")  # refused while routing: no receipt
    calls += 1
    assert resp.status_code == 503 and resp.headers["Retry-After"] == "1"
    # Meanwhile this process trials the primary itself, once per cool-down.
    await eventually(lambda: seen()[0] >= 5)

    up.state.clear_faults(A)
    healed = time.monotonic()

    async def approved() -> bool:
        return await state() == ("Approved", True)

    # One cool-down (1 s here) and the lifecycle update: the trial, since no probe runs in tests
    # (the schedule's is every two minutes).
    await eventually(approved, timeout=30, interval=0.02)
    print(f"breaker recovery: Approved {time.monotonic() - healed:.2f}s after the provider healed")
    resp, _, _ = await _call(http, auth, "rs-fb")
    calls += 1
    assert resp.status_code == 200 and resp.headers["X-Model-Router-Deployment"] == "rs/a"
    async with sessions() as s:
        events = (
            await s.scalars(
                select(OutboxEventRow)
                .where(col(OutboxEventRow.tenant_id) == tenant)
                .where(col(OutboxEventRow.aggregate_id) == "rs/a")
                .where(col(OutboxEventRow.event_type) == "DeploymentStateChanged")
                .order_by(col(OutboxEventRow.position))
            )
        ).all()
        receipts = (
            await s.scalars(
                select(InvocationReceiptRow).where(col(InvocationReceiptRow.tenant_id) == tenant)
            )
        ).all()
    moves = [(e.payload["fromState"], e.payload["toState"]) for e in events]
    assert moves[-2:] == [("Approved", "Degraded"), ("Degraded", "Approved")]
    assert len(receipts) == calls  # recovery trials are not invocations: no receipt


# Issue 20: behind a non-stream call the caller has seen nothing until the answer is whole, so
# a provider stream broken mid-way (after output was received, not emitted) is a failed attempt
# under the usual rules, never Partial: a cut (stream_incomplete, transient) is retried on the
# same deployment, then fallen back from; a stall (timeout) moves on to the fallback at once
# (domain/retry.py: a silent provider is not retried on the same route). The stall is caught by
# the idle bound (2 s in test settings), far inside the attempt bound (120 s): `took` shows it,
# under the attempt bound, which cannot end a call any sooner (tests/helpers/deadline.py).


async def test_a_non_stream_call_cut_mid_stream_is_retried_never_partial(ctx: Ctx) -> None:
    http, auth, up, sessions, tenant = ctx
    labels = {"provider": "openai", "reason": "stream_incomplete"}
    abandoned = metrics.attempts_abandoned.value(labels)
    up.inject(A, Fault(kind=FaultKind.STREAM_CUT, after_chunks=4, times=1))
    seen = Seen(up)
    resp, key, _ = await _call(http, auth, "rs-fb", LONG)
    assert resp.status_code == 200, resp.text
    # The whole answer, from the retry alone: nothing of the broken attempt is spliced in.
    assert resp.json()["choices"][0]["message"]["content"] == f"Echo: {LONG}"
    assert seen() == (2, 0)
    assert resp.headers["X-Model-Router-Deployment"] == "rs/a"
    row = await _receipt(sessions, tenant, key)
    assert (row.outcome, row.deployment_id, row.fallback_used) == ("Completed", "rs/a", False)
    assert row.usage_status == "Reported"
    assert metrics.attempts_abandoned.value(labels) == abandoned + 1


@pytest.mark.parametrize(
    ("kind", "reason", "primary_calls"),
    [(FaultKind.STREAM_CUT, "stream_incomplete", 3), (FaultKind.STREAM_STALL, "timeout", 1)],
)
async def test_a_non_stream_call_falls_back_when_the_primary_keeps_breaking(
    ctx: Ctx, attempt_bound: float, kind: FaultKind, reason: str, primary_calls: int
) -> None:
    http, auth, up, sessions, tenant = ctx
    labels = {"provider": "openai", "reason": reason}
    abandoned = metrics.attempts_abandoned.value(labels)
    up.inject(A, Fault(kind=kind, after_chunks=4))
    seen = Seen(up)
    resp, key, took = await _call(http, auth, "rs-fb", LONG)
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["message"]["content"] == f"Echo: {LONG}"
    assert resp.json()["model_router"]["deploymentId"] == "rs/b"
    # A cut is retried up to the retry rule's limit (three attempts), a stall is not.
    assert seen() == (primary_calls, 1)
    assert took < attempt_bound  # one idle bound for the stall, never the attempt bound
    row = await _receipt(sessions, tenant, key)
    assert (row.outcome, row.deployment_id, row.fallback_used) == ("Completed", "rs/b", True)
    assert row.usage_status == "Reported"
    # Each broken attempt on the primary was replaced, so each is counted as possibly billed.
    assert metrics.attempts_abandoned.value(labels) == abandoned + primary_calls


async def test_a_call_the_provider_refused_is_known_to_have_cost_nothing(ctx: Ctx) -> None:
    """A 429 on every attempt, or a 401: the provider took nothing, so the receipt's usage is
    known, Estimated at zero (awaiting no statement, in no reconciler's share, not in
    usage_unknown). It was Unknown, as a timeout is. A 500 may follow work: Unknown still."""
    http, auth, up, sessions, tenant = ctx

    async def refused(kind: FaultKind, *first: Fault) -> InvocationReceiptRow:
        """A call the provider fails so (after `first`), once the breaker the last one opened
        lets it through (one it refuses is claimed and called nothing: no receipt)."""
        for fault in first:
            up.inject(A, fault)
        up.inject(A, Fault(kind=kind))
        try:

            async def called() -> InvocationReceiptRow | None:
                _, key, _ = await _call(http, auth, "rs-solo")
                async with sessions() as session:
                    return await by_key(session, tenant, key)

            row: InvocationReceiptRow = await eventually(called, timeout=20, interval=0.3)
            return row
        finally:
            up.state.clear_faults(A)

    for kind in (FaultKind.RATE_LIMIT, FaultKind.AUTH):
        row = await refused(kind)
        assert (row.outcome, row.usage_status, row.close_reason) == (
            "Failed",
            "Estimated",
            "provider",
        )
        assert (row.input_tokens, row.output_tokens) == (0, 0)
    row = await refused(FaultKind.SERVER_ERROR)
    assert (row.outcome, row.usage_status, row.input_tokens) == ("Failed", "Unknown", None)

    # The breaker these failures opened is closed again by an answer: left open, this
    # process's recovery trials called the simulator's model in the tests after this one.
    async def answered() -> bool:
        resp, _, _ = await _call(http, auth, "rs-solo")
        return resp.status_code == 200

    await eventually(answered, timeout=20, interval=0.3)

    # A 500 (which may follow work), then 429s: the receipt is the last attempt's, but the
    # first may have been billed, so its usage is not known to be nothing. (The breaker is
    # closed again: the call retries on the same deployment.)
    up.inject(A, Fault(kind=FaultKind.SERVER_ERROR, times=1))
    up.inject(A, Fault(kind=FaultKind.RATE_LIMIT, times=2))
    try:
        _, key, _ = await _call(http, auth, "rs-solo")
    finally:
        up.state.clear_faults(A)
    row = await _receipt(sessions, tenant, key)
    assert (row.outcome, row.usage_status, row.input_tokens) == ("Failed", "Unknown", None)
    await eventually(answered, timeout=20, interval=0.3)


async def test_a_non_stream_call_stalled_mid_stream_fails_by_the_idle_bound(
    ctx: Ctx, attempt_bound: float
) -> None:
    http, auth, up, sessions, tenant = ctx
    up.inject(A, Fault(kind=FaultKind.STREAM_STALL, after_chunks=4, times=1))
    seen = Seen(up)
    resp, key, took = await _call(http, auth, "rs-solo", LONG)
    # No fallback on this profile: a transient failure the caller may retry, not a Partial.
    assert resp.status_code == 504 and resp.json()["error"]["code"] == "timeout"
    assert seen() == (1, 0) and 2.0 <= took < attempt_bound
    assert "stream idle timeout" in resp.json()["reason"], resp.text
    row = await _receipt(sessions, tenant, key)
    assert (row.outcome, row.usage_status) == ("Failed", "Unknown")
