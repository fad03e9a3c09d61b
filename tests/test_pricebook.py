"""Pricing revisions are published once, stay readable, and are tenant-scoped."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from domain.enums import Role, Scope
from domain.pricing import Pricebook
from store import pricebook
from store.db import transaction
from store.tables import PricebookEntryRow
from tests.conftest import TokenFactory
from tests.helpers.deadline import eventually


def revision(name: str, input_price: str = "2.5") -> dict[str, Any]:
    return {
        "revision": name,
        "entries": [
            {
                "provider": "openai",
                "model": "gpt-4.1",
                "inputUsdPerMtok": input_price,
                "outputUsdPerMtok": "10",
                "cachedInputUsdPerMtok": "1.25",
                "effectiveFrom": "2026-11-01",
            },
            {
                "provider": "anthropic",
                "model": "claude-sonnet",
                "inputUsdPerMtok": "3",
                "outputUsdPerMtok": "15",
                "cacheWriteUsdPerMtok": "3.75",
                "effectiveFrom": "2026-11-01",
            },
        ],
    }


def _one(name: str, **prices: Any) -> dict[str, Any]:
    """A revision of one price, its fields overridden by `prices`."""
    return {"revision": name, "entries": [{**revision(name)["entries"][0], **prices}]}


@pytest.fixture
async def auth(token_for: TokenFactory, tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {await token_for(tenant)}"}


async def test_publish_read_and_immutability(
    http: httpx.AsyncClient, auth: dict[str, str], token_for: TokenFactory, tenant: str
) -> None:
    first = await http.post("/factory/pricebook-revisions", json=revision("2026-11"), headers=auth)
    assert first.status_code == 201, first.text
    again = await http.post("/factory/pricebook-revisions", json=revision("2026-11"), headers=auth)
    assert again.status_code == 200
    changed = await http.post(
        "/factory/pricebook-revisions", json=revision("2026-11", "9.99"), headers=auth
    )
    assert changed.status_code == 409 and changed.json()["field"] == "body.revision"
    await http.post("/factory/pricebook-revisions", json=revision("2026-12", "2"), headers=auth)

    old = (await http.get("/factory/pricebook-revisions/2026-11", headers=auth)).json()
    prices = {(e["provider"], e["model"]): e for e in old["entries"]}
    assert float(prices[("openai", "gpt-4.1")]["inputUsdPerMtok"]) == 2.5
    assert prices[("anthropic", "claude-sonnet")]["cachedInputUsdPerMtok"] is None
    assert float(prices[("anthropic", "claude-sonnet")]["cacheWriteUsdPerMtok"]) == 3.75
    assert prices[("openai", "gpt-4.1")]["cacheWriteUsdPerMtok"] is None
    # The write price is one of the revision's prices: another is another revision.
    other = revision("2026-11")
    other["entries"][1]["cacheWriteUsdPerMtok"] = "6"
    rewritten = await http.post("/factory/pricebook-revisions", json=other, headers=auth)
    assert rewritten.status_code == 409
    listed = (await http.get("/factory/pricebook-revisions", headers=auth)).json()
    assert listed == [{"revision": "2026-11", "entries": 2}, {"revision": "2026-12", "entries": 2}]

    reader = {
        "Authorization": f"Bearer {await token_for(tenant, [Role.OBSERVER], [Scope.MODELS_READ])}"
    }
    assert (
        await http.get("/factory/pricebook-revisions/2026-11", headers=reader)
    ).status_code == 200
    denied = await http.post("/factory/pricebook-revisions", json=revision("x"), headers=reader)
    assert denied.status_code == 403

    other = {"Authorization": f"Bearer {await token_for(tenant + '-p')}"}
    assert (
        await http.get("/factory/pricebook-revisions/2026-11", headers=other)
    ).status_code == 404
    assert (await http.get("/factory/pricebook-revisions", headers=other)).json() == []


async def test_a_revision_named_with_a_slash_reads_back_and_a_racing_retry_is_a_replay(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    # Published with 201, it was a 404 to read, though receipts name it as their revision.
    named = await http.post("/factory/pricebook-revisions", json=revision("2026/q1"), headers=auth)
    assert named.status_code == 201, named.text
    read = await http.get("/factory/pricebook-revisions/2026/q1", headers=auth)
    assert read.status_code == 200 and read.json()["revision"] == "2026/q1"
    # The same revision sent twice at once (a client's retry racing its first send): the first
    # send's transaction is held open here, its rows written, while the retry arrives; the
    # retry then meets them at its own insert. It was a 409 for the very same prices.
    first_send = Pricebook.model_validate(revision("race"))
    async with sessions() as held:
        async with held.begin():
            assert await pricebook.publish(held, tenant, first_send)
            retry = asyncio.create_task(
                http.post("/factory/pricebook-revisions", json=revision("race"), headers=auth)
            )
            # Committed only once the retry waits on the rows (the catalog's version row).
            await eventually(lambda: _waiting_on_a_lock(sessions), timeout=10, interval=0.05)
        answered = await retry
    assert answered.status_code == 200, answered.text


async def _waiting_on_a_lock(sessions: async_sessionmaker[AsyncSession]) -> bool:
    async with sessions() as look:
        waiting = await look.scalar(
            # The retry's own statement, waiting on the rows the first send holds.
            text(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND (query ILIKE '%pricebook%' OR query ILIKE '%catalog_state%')"
            )
        )
    return bool(waiting)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (
            {
                "revision": "r",
                "entries": [{**revision("r")["entries"][0], "inputUsdPerMtok": "-1"}],
            },
            "body.entries.0.inputUsdPerMtok",
        ),
        ({"revision": "r", "entries": [revision("r")["entries"][0]] * 2}, "body"),
        ({"revision": "r", "entries": []}, "body.entries"),
        ({"revision": "", "entries": revision("r")["entries"]}, "body.revision"),
        # Beyond what the store holds exactly (NUMERIC(18, 8), the names' columns): these were
        # a 503 "store unavailable" from PostgreSQL's refusal, or a ninth decimal rounded away.
        ({"revision": "r" * 101, "entries": revision("r")["entries"]}, "body.revision"),
        (_one("r", inputUsdPerMtok="10000000000"), "body.entries.0.inputUsdPerMtok"),
        (_one("r", outputUsdPerMtok=1.7e308), "body.entries.0.outputUsdPerMtok"),
        (_one("r", cachedInputUsdPerMtok="0.123456789"), "body.entries.0.cachedInputUsdPerMtok"),
        (_one("r", provider="p" * 65), "body.entries.0.provider"),
        # A name no deployment can have (they are lower case): its prices matched no call.
        (_one("r", provider="OpenAI"), "body.entries.0.provider"),
        (_one("r", model="m" * 201), "body.entries.0.model"),
    ],
)
async def test_bad_revisions_are_422_naming_the_field(
    http: httpx.AsyncClient, auth: dict[str, str], body: dict[str, Any], field: str
) -> None:
    resp = await http.post("/factory/pricebook-revisions", json=body, headers=auth)
    assert resp.status_code == 422, resp.text
    body_ = resp.json()
    fields = [e["field"] for e in body_.get("errors", [])] + [body_.get("field")]
    assert any(f and f.startswith(field) for f in fields), body_
    # Nothing of it was kept.
    assert (await http.get("/factory/pricebook-revisions", headers=auth)).json() == []


async def test_a_price_at_the_stores_limits_reads_back_exactly_and_republishes_as_itself(
    http: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    body = _one("r" * 100, inputUsdPerMtok="9999999999.99999999", outputUsdPerMtok="0.00000001")
    body["entries"][0].update(provider="p" * 64, model="m" * 200)
    first = await http.post("/factory/pricebook-revisions", json=body, headers=auth)
    assert first.status_code == 201, first.text
    stored = (await http.get(f"/factory/pricebook-revisions/{'r' * 100}", headers=auth)).json()
    (entry,) = stored["entries"]
    assert Decimal(entry["inputUsdPerMtok"]) == Decimal("9999999999.99999999")
    assert entry["outputUsdPerMtok"] == "0.00000001"  # fixed point: it read back as `1E-8`
    again = await http.post("/factory/pricebook-revisions", json=body, headers=auth)
    assert again.status_code == 200, again.text


async def test_a_revision_announcing_a_price_change_is_published_and_priced_by_date(
    http: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    """Two prices of one model from different dates (an announced change), as the pricebook
    allows: the store's unique key left the date out, and every publish was a 409."""
    body = {
        "revision": "2026-change",
        "entries": [
            {**_one("x")["entries"][0], "effectiveFrom": "2026-01-01"},
            {**_one("x")["entries"][0], "effectiveFrom": "2026-06-01", "outputUsdPerMtok": "12"},
        ],
    }
    published = await http.post("/factory/pricebook-revisions", json=body, headers=auth)
    assert published.status_code == 201, published.text
    again = await http.post("/factory/pricebook-revisions", json=body, headers=auth)
    assert again.status_code == 200
    read = (await http.get("/factory/pricebook-revisions/2026-change", headers=auth)).json()
    dates = sorted((e["effectiveFrom"], e["outputUsdPerMtok"]) for e in read["entries"])
    assert [(d, Decimal(p)) for d, p in dates] == [
        ("2026-01-01", Decimal("10")),
        ("2026-06-01", Decimal("12")),
    ]


async def test_a_revision_stored_with_a_provider_name_now_refused_still_reads_back(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """Published before names were held to a deployment's: read through the model that now
    refuses it, every read of the revision (a call's price among them) would fail."""
    async with transaction(sessions) as session:
        session.add(
            PricebookEntryRow(
                tenant_id=tenant,
                revision="legacy",
                effective_from=datetime(2026, 1, 1, tzinfo=UTC),
                provider="OpenAI",
                model="gpt-4.1",
                input_usd_per_mtok=Decimal("2.5"),
                output_usd_per_mtok=Decimal("10"),
            )
        )
    read = await http.get("/factory/pricebook-revisions/legacy", headers=auth)
    assert read.status_code == 200, read.text
    assert [e["provider"] for e in read.json()["entries"]] == ["OpenAI"]
