"""The gateway surface for runtimes (Invoke, Embed, Rerank with receipts), budgets that deny
before any provider sees the call, and the invocation metrics."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import datetime
from decimal import Decimal

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client

from core import metrics
from domain.invocation import invocation_id
from providers.upstream import UpstreamServer
from providers.upstream.faults import Fault, FaultKind
from store.receipt_statements import ReceiptStatements
from store.receipts import by_key
from tests.conftest import TokenFactory
from tests.helpers.catalog import profile_event, publish, record_evidence, register
from tests.helpers.deadline import eventually


async def _price_chat(
    http: httpx.AsyncClient, auth: dict[str, str], revision: str, input_: str, output: str
) -> None:
    """A pricing revision of one price: gw-chat's, in USD per million tokens."""
    entry = {
        "provider": "openai",
        "model": "gw-chat",
        "inputUsdPerMtok": input_,
        "outputUsdPerMtok": output,
        "effectiveFrom": "2026-01-01",
    }
    prices = {"revision": revision, "entries": [entry]}
    published = await http.post("/factory/pricebook-revisions", json=prices, headers=auth)
    assert published.status_code == 201, published.text


@pytest.fixture
async def auth(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
) -> dict[str, str]:
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    await _price_chat(http, auth, "gw-1", "1000", "2000")
    for dep, model, provider in (
        ("gw/chat", "gw-chat", "openai"),
        ("gw/embed", "gw-embed", "openai"),
        ("gw/rerank", "gw-rerank", "rerank"),
    ):
        await register(
            http, auth, dep, model=model, provider=provider, endpointRef=upstream.endpoint_ref
        )
        await record_evidence(temporal_client, tenant, dep, {"tool-calling": 0.9})
        assert (
            await http.post(f"/factory/model-deployments/{dep}/approve", headers=auth)
        ).status_code == 200
    for profile, dep, modality in (
        ("gw", "gw/chat", "Chat"),
        ("gw-embed", "gw/embed", "Embedding"),
        ("gw-rerank", "gw/rerank", "Rerank"),
    ):
        event = profile_event(profile, [dep], {}, modality=modality, priceBasis="gw-1")
        assert (await publish(http, auth, event)).status_code == 200
    return auth


def _chat(text: str = "gateway hello") -> dict[str, object]:
    return {"messages": [{"role": "user", "content": text}], "max_tokens": 50}


async def test_invoke_json_and_sse_end_with_the_receipt(
    http: httpx.AsyncClient, auth: dict[str, str], tenant: str
) -> None:
    run = str(uuid.uuid4())
    before = metrics.invocations.value(
        {"tenant": tenant, "profile": "gw", "provider": "openai", "outcome": "Completed"}
    )
    resp = await http.post(
        "/gateway/invoke",
        headers=auth,
        json={
            "profileId": "gw",
            "runId": run,
            "attemptId": str(uuid.uuid4()),
            "idempotencyKey": "gw-1",
            "request": _chat(),
        },
    )
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["output"]["text"] == "Echo: gateway hello"
    # Callers name profiles: the provider's model and ids are on no answer (the receipt names
    # the deployment).
    assert not {"response_model", "provider_request_id", "response_id"} & set(body["output"])
    receipt = body["receipt"]
    assert receipt["outcome"] == "Completed" and receipt["deploymentId"] == "gw/chat"
    assert Decimal(receipt["estimatedCostUsd"]) > 0  # priced from revision gw-1
    # One receipt shape: the run's receipt list shows the same receipt, key for key.
    listed = await http.get(f"/factory/runs/{run}/model-receipts", headers=auth)
    [stored] = listed.json()
    assert stored == {k: v for k, v in receipt.items() if k in stored}
    assert set(receipt) - set(stored) == {
        "errorKind",
        "errorReason",
        "fallbackFrom",
        "fallbackReason",
    }
    assert receipt["startedAt"].endswith("Z") and receipt["endedAt"].endswith("Z")

    async with http.stream(
        "POST",
        "/gateway/invoke",
        headers=auth,
        json={"profileId": "gw", "runId": run, "request": _chat("streamed"), "stream": True},
    ) as sse:
        lines = [line async for line in sse.aiter_lines()]
    events = [line.removeprefix("event: ") for line in lines if line.startswith("event: ")]
    assert events[0] == "text_delta" and events[-1] == "receipt" and "finish" in events
    finish = json.loads(lines[lines.index("event: finish") + 1].removeprefix("data: "))
    assert (
        finish["reason"] and "response_model" not in finish and "provider_request_id" not in finish
    )
    [*_, last] = [line for line in lines if line.startswith("data: ")]
    final = json.loads(last.removeprefix("data: "))
    assert final["invocationId"] and final["usageStatus"] and final["deploymentId"] == "gw/chat"
    after = metrics.invocations.value(
        {"tenant": tenant, "profile": "gw", "provider": "openai", "outcome": "Completed"}
    )
    assert after - before == 2


async def test_a_cost_finer_than_the_receipt_holds_is_the_same_on_every_surface(
    http: httpx.AsyncClient, auth: dict[str, str], tenant: str
) -> None:
    # Eight-decimal prices make costs of up to fourteen decimals; the receipt's NUMERIC(18, 8)
    # rounded them, while the answer and the ModelInvoked event carried them unrounded.
    await _price_chat(http, auth, "gw-fine", "0.12345678", "0.87654321")
    event = profile_event("gw-fine", ["gw/chat"], {}, priceBasis="gw-fine")
    assert (await publish(http, auth, event)).status_code == 200
    run = str(uuid.uuid4())
    resp = await http.post(
        "/gateway/invoke",
        headers=auth,
        json={"profileId": "gw-fine", "runId": run, "request": _chat()},
    )
    assert resp.status_code == 200, resp.text
    answered = resp.json()["receipt"]
    cost = Decimal(answered["estimatedCostUsd"])
    assert cost > 0 and cost == cost.quantize(Decimal("1e-8"))
    [stored] = (await http.get(f"/factory/runs/{run}/model-receipts", headers=auth)).json()
    assert Decimal(stored["estimatedCostUsd"]) == cost

    async def invoked() -> dict[str, object] | None:
        page = (await http.get("/factory/events?limit=500", headers=auth)).json()["events"]
        mine = [e for e in page if e["data"].get("invocationId") == answered["invocationId"]]
        return mine[0]["data"] if mine else None

    published = await eventually(invoked)
    assert Decimal(str(published["estimatedCostUsd"])) == cost


async def test_embed_and_rerank_with_receipts(
    http: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    embedded = await http.post(
        "/gateway/embed", headers=auth, json={"profileId": "gw-embed", "inputs": ["a", "b", "c"]}
    )
    assert embedded.status_code == 200, embedded.text
    assert (
        len(embedded.json()["vectors"]) == 3
        and embedded.json()["receipt"]["outcome"] == "Completed"
    )
    # The width asked for, as /v1/embeddings takes it: it was a 422 here.
    narrow = await http.post(
        "/gateway/embed",
        headers=auth,
        json={"profileId": "gw-embed", "inputs": ["a"], "dimensions": 8},
    )
    assert narrow.status_code == 200, narrow.text
    assert len(narrow.json()["vectors"][0]) == 8 != len(embedded.json()["vectors"][0])
    ranked = await http.post(
        "/gateway/rerank",
        headers=auth,
        json={
            "profileId": "gw-rerank",
            "query": "red fruit",
            "documents": ["apple", "sky", "cherry"],
            "topN": 2,
        },
    )
    assert ranked.status_code == 200, ranked.text
    results = ranked.json()["results"]
    assert len(results) == 2 and {r["index"] for r in results} <= {0, 1, 2}
    assert ranked.json()["receipt"]["deploymentId"] == "gw/rerank"
    assert embedded.json()["receipt"]["profileId"] == "gw-embed"


async def test_the_idempotency_key_header_keys_a_gateway_call_as_on_the_v1_surfaces(
    http: httpx.AsyncClient, auth: dict[str, str], upstream: UpstreamServer
) -> None:
    # Runtimes send the header everywhere; here it was ignored: every retry a new call, a
    # second provider call and charge.
    before = upstream.requests("gw-chat")
    key = {**auth, "Idempotency-Key": f"gw-{uuid.uuid4().hex}"}
    body = {"profileId": "gw", "request": {"messages": [{"role": "user", "content": "k"}]}}
    first = await http.post("/gateway/invoke", headers=key, json=body)
    again = await http.post("/gateway/invoke", headers=key, json=body)
    assert first.status_code == again.status_code == 200, again.text
    assert first.json()["receipt"]["invocationId"] == again.json()["receipt"]["invocationId"]
    assert upstream.requests("gw-chat") == before + 1
    # Both, naming different keys: which one was meant cannot be told.
    both = await http.post(
        "/gateway/invoke", headers=key, json={**body, "idempotencyKey": "another"}
    )
    assert both.status_code == 422, both.text
    assert both.json()["errors"][0]["field"] == "header.Idempotency-Key"
    assert upstream.requests("gw-chat") == before + 1


async def _cheap_and_dear(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    temporal: Client,
    upstream: UpstreamServer,
    tag: str,
    first: str,
) -> None:
    """Two approved deployments `{tag}/cheap` and `{tag}/dear` (models `{tag}-cheap`, a
    thousand dollars a million tokens, and `{tag}-dear`, a hundred times more, in pricing
    revision `{tag}-1`), and a profile `{tag}` on the `first` of them, falling back to a
    profile on the other, `{tag}-dear` or `{tag}-cheap`."""
    entries = [
        {"provider": "openai", "model": f"{tag}-{kind}", "inputUsdPerMtok": usd,
         "outputUsdPerMtok": usd, "effectiveFrom": "2026-01-01"}
        for kind, usd in (("cheap", "1000"), ("dear", "100000"))
    ]  # fmt: skip
    prices = {"revision": f"{tag}-1", "entries": entries}
    assert (await http.post("/factory/pricebook-revisions", json=prices, headers=auth)).is_success
    for kind in ("cheap", "dear"):
        dep = f"{tag}/{kind}"
        await register(http, auth, dep, model=f"{tag}-{kind}", endpointRef=upstream.endpoint_ref)
        await record_evidence(temporal, tenant, dep, {"tool-calling": 0.9})
        approved = await http.post(f"/factory/model-deployments/{dep}/approve", headers=auth)
        assert approved.status_code == 200, approved.text
    other = "dear" if first == "cheap" else "cheap"
    fallback = profile_event(f"{tag}-{other}", [f"{tag}/{other}"], {}, priceBasis=f"{tag}-1")
    assert (await publish(http, auth, fallback)).status_code == 200
    event = profile_event(
        tag, [f"{tag}/{first}"], {}, fallbackEnabled=True, fallbackChain=[f"{tag}-{other}"],
        priceBasis=f"{tag}-1",
    )  # fmt: skip
    published = await publish(http, auth, event)
    assert published.status_code == 200, published.text


async def test_a_budget_covers_every_deployment_that_may_answer_not_only_the_first(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
) -> None:
    # Only the first target was priced: when it failed, a fallback a hundred times dearer
    # answered, its cost past the budget the call was admitted under.
    await _cheap_and_dear(http, auth, tenant, temporal_client, upstream, "bud", first="cheap")
    upstream.inject("bud-cheap", Fault(kind=FaultKind.UNAVAILABLE))
    try:
        # Worst cases: about 0.04 USD on the cheap one, 4 USD on the dear one.
        call = {"profileId": "bud", "budgetUsd": "1", "request": {**_chat(), "max_tokens": 10}}
        failed = await http.post("/gateway/invoke", headers=auth, json=call)
    finally:
        upstream.state.clear_faults("bud-cheap")
    assert failed.status_code == 503, failed.text
    assert upstream.requests("bud-cheap") >= 1 and upstream.requests("bud-dear") == 0
    # Without the budget the dear one is the fallback it was.
    unbounded = {k: v for k, v in call.items() if k != "budgetUsd"}
    answered = await http.post("/gateway/invoke", headers=auth, json=unbounded)
    assert answered.status_code == 200, answered.text


async def test_a_first_candidate_the_budget_passes_over_is_a_fallback_that_says_why(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
) -> None:
    """The plan's first deployment is past the budget, so the next answers: the receipt's
    fallback named no reason (ModelFallbackUsed's required `reason` null, the metric's
    "unknown")."""
    await _cheap_and_dear(http, auth, tenant, temporal_client, upstream, "bpo", first="dear")
    # Worst cases: about 4 USD on the dear one, 0.04 USD on the cheap one.
    call = {"profileId": "bpo", "budgetUsd": "1", "request": {**_chat(), "max_tokens": 10}}
    answered = await http.post("/gateway/invoke", headers=auth, json=call)
    assert answered.status_code == 200, answered.text
    receipt = answered.json()["receipt"]
    assert receipt["deploymentId"] == "bpo/cheap" and receipt["fallbackUsed"] is True
    assert receipt["fallbackFrom"] == "bpo/dear" and receipt["fallbackReason"] == "over-budget"
    assert upstream.requests("bpo-dear") == 0


async def test_an_embedding_budget_reserves_no_output(
    http: httpx.AsyncClient, auth: dict[str, str], upstream: UpstreamServer
) -> None:
    """Embeddings produce no output tokens (their receipts record 0), but their budget was
    reserved 4,096 of them, as a chat's without an allowance: any embedding model priced with
    an output price was a wrongful over-budget 402."""
    entry = {"provider": "openai", "model": "gw-embed", "inputUsdPerMtok": "1000",
             "outputUsdPerMtok": "1000", "effectiveFrom": "2026-01-01"}  # fmt: skip
    prices = {"revision": "emb-1", "entries": [entry]}
    assert (await http.post("/factory/pricebook-revisions", json=prices, headers=auth)).is_success
    event = profile_event("emb-priced", ["gw/embed"], {}, modality="Embedding", priceBasis="emb-1")
    assert (await publish(http, auth, event)).status_code == 200
    # Worst case: a few input tokens at 1,000 USD a million, well within 0.1 USD; with 4,096
    # output tokens reserved, 4.1 USD.
    embed = {"profileId": "emb-priced", "inputs": ["x"], "budgetUsd": "0.1"}
    answered = await http.post("/gateway/embed", headers=auth, json=embed)
    assert answered.status_code == 200, answered.text


async def test_an_empty_text_to_embed_is_refused_before_any_call(
    http: httpx.AsyncClient, auth: dict[str, str], upstream: UpstreamServer
) -> None:
    """OpenAI refuses an empty input ("cannot be an empty string"): it was claimed and sent,
    the key spent on that 400, and a self-hosted server answered a vector for nothing."""
    before = upstream.requests(endpoint="embeddings")
    for body, field in (({"input": ""}, "body.input"), ({"input": ["a", ""]}, "body.input.1")):
        refused = await http.post(
            "/v1/embeddings", headers=auth, json={"model": "gw-embed", **body}
        )
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["param"] == field.removeprefix("body."), refused.text
    refused = await http.post(
        "/gateway/embed", headers=auth, json={"profileId": "gw-embed", "inputs": ["a", ""]}
    )
    assert refused.status_code == 422, refused.text
    assert refused.json()["errors"][0]["field"] == "body.inputs.1"
    assert upstream.requests(endpoint="embeddings") == before


async def test_a_price_basis_never_published_prices_as_routing_did(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    temporal_client: Client,
    upstream: UpstreamServer,
) -> None:
    """Routing priced the candidates at the tenant's current revision (its only one) when the
    profile's priceBasis names none published; admission and the receipt used the priceBasis
    as written: every budgeted call was denied `no-price`, every other receipt had no cost."""
    tenant = f"tenant-{uuid.uuid4().hex[:8]}"  # one pricing revision only: it is the current
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    await _cheap_and_dear(http, auth, tenant, temporal_client, upstream, "pbm", first="cheap")
    event = profile_event("pbm-unpriced", ["pbm/cheap"], {}, priceBasis="never-published")
    assert (await publish(http, auth, event)).status_code == 200
    call = {"profileId": "pbm-unpriced", "budgetUsd": "1", "request": {**_chat(), "max_tokens": 10}}
    answered = await http.post("/gateway/invoke", headers=auth, json=call)
    assert answered.status_code == 200, answered.text
    receipt = answered.json()["receipt"]
    assert receipt["pricingRevision"] == "pbm-1", receipt
    assert receipt["estimatedCostUsd"] is not None and Decimal(receipt["estimatedCostUsd"]) > 0


async def test_budget_denies_before_the_provider_and_leaves_a_receipt(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    before = upstream.requests("gw-chat")
    denials = metrics.denials.value({"tenant": tenant, "reason": "over-budget"})
    poor = {"profileId": "gw", "idempotencyKey": "poor", "budgetUsd": "0.0001", "request": _chat()}
    denied = await http.post("/gateway/invoke", headers=auth, json=poor)
    assert denied.status_code == 402, denied.text
    assert denied.json()["reason"] == "over-budget"
    assert upstream.requests("gw-chat") == before
    # Its key sent again replays the same denial (it was a 502, "the model call failed"),
    # counted once (it was counted each time).
    again = await http.post("/gateway/invoke", headers=auth, json=poor)
    assert again.status_code == 402, again.text
    assert again.json()["receiptId"] == denied.json()["receiptId"]
    assert again.json()["type"] == denied.json()["type"]
    # Streamed, the same (it was a 200 stream ending in an error event).
    streamed = await http.post("/gateway/invoke", headers=auth, json={**poor, "stream": True})
    assert streamed.status_code == 402, streamed.text
    assert metrics.denials.value({"tenant": tenant, "reason": "over-budget"}) == denials + 1
    async with sessions() as s:
        row = await by_key(s, tenant, "poor")
    assert row is not None and (row.outcome, row.usage_status) == ("Denied", "Estimated")
    assert str(row.invocation_id) == denied.json()["receiptId"]

    rich = await http.post(
        "/v1/chat/completions",
        headers={**auth, "X-Budget-Usd": "100"},
        json={"model": "gw", "messages": [{"role": "user", "content": "ok"}], "max_tokens": 10},
    )
    assert rich.status_code == 200 and upstream.requests("gw-chat") == before + 1

    # A deployment with no price while a budget applies is refused, never reserved at zero.
    unpriced = await http.post(
        "/gateway/embed",
        headers=auth,
        json={"profileId": "gw-embed", "inputs": ["x"], "budgetUsd": "100"},
    )
    assert unpriced.status_code == 503 and "No candidate" in unpriced.json()["detail"]
    # The OpenAI surface's embeddings judge the same budget: the header was dropped there, and
    # the call answered unpriced.
    unpriced = await http.post(
        "/v1/embeddings",
        headers={**auth, "X-Budget-Usd": "100"},
        json={"model": "gw-embed", "input": ["x"]},
    )
    assert unpriced.status_code == 503 and "No candidate" in unpriced.json()["detail"]


@pytest.mark.parametrize("streamed", [False, True])
async def test_a_call_whose_receipt_another_closed_is_told_what_it_says(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    streamed: bool,
) -> None:
    """The receipt of a call still running is closed by another (the sweeper, or a workflow
    that took the call for lost): the call's own close finds it closed, and its caller is told
    what the receipt says, not the answer beside a receipt that says Failed."""
    key = f"swept-{uuid.uuid4().hex[:8]}"
    # A stream's output begins, then pauses; a whole answer is held until it is complete.
    fault = (
        Fault(kind=FaultKind.KEEP_ALIVE, after_chunks=2, delay=2, interval=0.5, times=1)
        if streamed
        else Fault(kind=FaultKind.SLOW_FIRST_TOKEN, delay=1.2, times=1)
    )
    upstream.inject("gw-chat", fault)
    body = {"profileId": "gw", "idempotencyKey": key, "request": _chat(), "stream": streamed}
    call = asyncio.create_task(http.post("/gateway/invoke", headers=auth, json=body))

    claimed: list[datetime] = []

    async def in_flight() -> bool:
        async with sessions() as s:
            row = await by_key(s, tenant, key)
        if row is None or row.ended_at is not None:
            return False
        claimed.append(row.started_at)
        return True

    await eventually(in_flight, timeout=10, interval=0.02)
    statements = ReceiptStatements(sessions.kw["bind"])
    assert await statements.sweep(tenant, invocation_id(tenant, key), claimed[0])
    answered = await call
    async with sessions() as s:
        row = await by_key(s, tenant, key)
    assert row is not None and (row.outcome, row.close_reason) == ("Failed", "swept")
    if streamed:
        assert answered.status_code == 200  # the stream had begun: it ends with the failure
        events = [line for line in answered.text.splitlines() if line.startswith("event: ")]
        assert events[-1] == "event: error", events  # not the receipt of an answer
        data = answered.text.rsplit("event: error", 1)[1].split("data: ", 1)[1].split("\n")[0]
        error = json.loads(data)
        # As every surface's stream error: why it closed and whether to come back.
        assert (error["closeReason"], error["errorClass"]) == ("swept", "permanent"), error
    else:
        assert answered.status_code == 409, answered.text
        assert answered.json()["closeReason"] == "swept"


async def test_a_profile_row_that_does_not_read_routes_nothing_and_stops_no_other(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """A profile version written before a rule was tightened, or by hand, failed the tenant's
    whole catalog snapshot as it was read: every call of every profile of the tenant failed.
    Left out alone, a newest version that did not read routed new runs on the version before
    it, whatever it had tightened. The profile routes nothing, a 409 saying why, and the
    tenant's other profiles route as before."""
    from sqlalchemy import update
    from sqlmodel import col

    from store.db import transaction
    from store.tables import ModelProfileRow

    for version in ("1", "2"):
        event = profile_event("gw-unreadable", ["gw/chat"], {}, version=version)
        assert (await publish(http, auth, event)).status_code == 200
    broken = {"profileId": "gw-unreadable", "request": _chat()}
    assert (await http.post("/gateway/invoke", headers=auth, json=broken)).status_code == 200
    async with transaction(sessions) as session:
        await session.execute(
            update(ModelProfileRow)
            .where(col(ModelProfileRow.tenant_id) == tenant)
            .where(col(ModelProfileRow.profile_id) == "gw-unreadable")
            .where(col(ModelProfileRow.version) == "2")
            .values(required_capabilities={"tool-calling": "very-high"})
        )
    # The row written behind the catalog's back: a publish elsewhere moves the version.
    other = profile_event("gw-other", ["gw/chat"], {})
    assert (await publish(http, auth, other)).status_code == 200
    fine = {"profileId": "gw", "request": _chat()}
    answered = await http.post("/gateway/invoke", headers=auth, json=fine)
    assert answered.status_code == 200, answered.text
    refused = await http.post("/gateway/invoke", headers=auth, json=broken)
    assert refused.status_code == 409, refused.text
    problem = refused.json()
    assert problem["type"].endswith("/stored-record-unreadable"), problem
    assert "very-high" not in refused.text
