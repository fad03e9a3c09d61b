"""A tenant policy's revision names one set of rules for good. Route plans, decision records,
receipts and events name the policy they were decided under by its revision alone; the policy
was one row a tenant, and a PUT compared its revision with that row's only, so r1 (rules A),
then r2, then r1 with rules C was accepted (and a first r1 after other history), and `r1` no
longer named one set of rules. Every revision published is now kept (migration 0021) and a
revision published with other rules is a 409 naming `revision`, whether it is current or not."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col, select

from domain.policy import baseline_policy
from store import catalog_state, routing_settings
from store.db import create_engine, session_factory
from store.migrate import downgrade, upgrade
from store.routing_tables import TenantPolicyRevisionRow, TenantPolicyRow
from tests.conftest import TokenFactory, create_database, drop_database
from tests.helpers.deadline import UNBOUNDED, eventually

_URL = "/factory/tenant-policy"


def _rules(*regions: str) -> dict[str, Any]:
    """A policy document (no tenant, no revision) that tells its rules apart by its regions."""
    return {
        "allowedPrivacyClasses": {
            "Public": ["External", "Regional", "Confidential", "Local"],
            "Internal": ["Regional", "Confidential", "Local"],
        },
        "allowedRegions": list(regions),
    }


def _baseline_rules(tenant: str) -> dict[str, Any]:
    return baseline_policy(tenant).model_dump(
        mode="json", by_alias=True, exclude={"tenant_id", "revision"}
    )


async def _auth(token_for: TokenFactory, tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {await token_for(tenant)}"}


async def _put(
    http: httpx.AsyncClient, auth: dict[str, str], revision: str, rules: dict[str, Any]
) -> httpx.Response:
    return await http.put(_URL, json={"revision": revision, "policy": rules}, headers=auth)


async def _history(
    sessions: async_sessionmaker[AsyncSession], tenant: str
) -> dict[str, frozenset[str]]:
    """Each revision the tenant published, with its rules' regions."""
    async with sessions() as s:
        rows = (
            await s.scalars(
                select(TenantPolicyRevisionRow).where(
                    col(TenantPolicyRevisionRow.tenant_id) == tenant
                )
            )
        ).all()
    return {r.revision: frozenset(r.document.get("allowedRegions") or ()) for r in rows}


async def test_a_revision_published_before_with_other_rules_is_refused_though_not_current(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """r1 (A), r2 (B), then r1 with rules C: accepted, and plans that said r1 named A or C."""
    tenant = f"{tenant}-hist"
    auth = await _auth(token_for, tenant)
    assert (await _put(http, auth, "r1", _rules("eu-west"))).status_code == 200
    assert (await _put(http, auth, "r2", _rules("eu-north"))).status_code == 200
    async with sessions() as s:
        version = await catalog_state.current(s)

    refused = await _put(http, auth, "r1", _rules("us-east"))
    assert refused.status_code == 409, refused.text
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.json()["field"] == "body.revision"
    # Nothing written: the current policy, the history and the catalog's version as they were.
    current = (await http.get(_URL, headers=auth)).json()
    assert current["revision"] == "r2" and current["allowedRegions"] == ["eu-north"]
    assert await _history(sessions, tenant) == {
        "r1": frozenset({"eu-west"}),
        "r2": frozenset({"eu-north"}),
    }
    async with sessions() as s:
        assert await catalog_state.current(s) == version


async def test_an_old_revision_sent_again_with_its_own_rules_is_the_policy_again(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """An operator rolling back: r1 sent again with r1's rules (its sets in another order) is
    accepted and in force again, under the name its earlier plans already carry. Its history
    row keeps its first publication."""
    tenant = f"{tenant}-back"
    auth = await _auth(token_for, tenant)
    assert (await _put(http, auth, "r1", _rules("eu-west", "eu-north"))).status_code == 200
    async with sessions() as s:
        first = await s.get(TenantPolicyRevisionRow, (tenant, "r1"))
        assert first is not None
        published_at = first.published_at
    assert (await _put(http, auth, "r2", _rules("us-east"))).status_code == 200

    again = await _put(http, auth, "r1", _rules("eu-north", "eu-west"))
    assert again.status_code == 200, again.text
    current = (await http.get(_URL, headers=auth)).json()
    assert current["revision"] == "r1"
    assert set(current["allowedRegions"]) == {"eu-west", "eu-north"}
    async with sessions() as s:
        kept = await s.get(TenantPolicyRevisionRow, (tenant, "r1"))
        assert kept is not None and kept.published_at == published_at
    # And the same PUT once more is a replay, as any idempotent PUT is.
    assert (await _put(http, auth, "r1", _rules("eu-west", "eu-north"))).status_code == 200


async def test_the_baselines_revision_names_the_baseline(
    http: httpx.AsyncClient, token_for: TokenFactory, tenant: str
) -> None:
    """A tenant that wrote no policy routes under the baseline, and its plans record the
    baseline's revision: a PUT of that revision with other rules made it name two."""
    tenant = f"{tenant}-base"
    auth = await _auth(token_for, tenant)
    baseline = baseline_policy(tenant).revision
    refused = await _put(http, auth, baseline, _rules("eu-west"))
    assert refused.status_code == 409, refused.text
    assert refused.json()["field"] == "body.revision"
    assert (await http.get(_URL, headers=auth)).json()["revision"] == baseline
    written = await _put(http, auth, baseline, _baseline_rules(tenant))
    assert written.status_code == 200, written.text


async def _waiting_on(sessions: async_sessionmaker[AsyncSession], table: str, count: int) -> bool:
    async with sessions() as look:
        waiting = await look.scalar(
            sa.text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock' AND query ILIKE :table"
            ),
            {"table": f"%{table}%"},
        )
    return int(waiting or 0) >= count


async def test_two_puts_of_one_new_revision_with_other_rules_at_once_leave_one_of_them(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """Held where they next need a lock until both wait there, then let go together: one is
    the revision, the other a 409, and the history holds the rules now in force."""
    tenant = f"{tenant}-race"
    auth = await _auth(token_for, tenant)
    bodies = [_rules("eu-west"), _rules("us-east")]
    async with sessions() as gate, gate.begin():
        await gate.execute(sa.text("UPDATE catalog_state SET version = version + 1"))
        races = [asyncio.ensure_future(_put(http, auth, "new", rules)) for rules in bodies]
        await eventually(lambda: _waiting_on(sessions, "catalog_state", 2), timeout=UNBOUNDED)
    answers = await asyncio.gather(*races)
    assert sorted(a.status_code for a in answers) == [200, 409], [a.text for a in answers]
    won = next(rules for rules, a in zip(bodies, answers, strict=True) if a.status_code == 200)
    current = (await http.get(_URL, headers=auth)).json()
    assert current["revision"] == "new" and current["allowedRegions"] == won["allowedRegions"]
    assert await _history(sessions, tenant) == {"new": frozenset(won["allowedRegions"])}


@pytest.mark.parametrize("same", [True, False], ids=["same-rules", "other-rules"])
async def test_a_put_that_loses_the_revisions_insert_is_answered_as_had_it_come_second(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    sessions: async_sessionmaker[AsyncSession],
    same: bool,
) -> None:
    """The history's primary key is the last word: a writer of the revision that took no turn
    at the catalog's version row (here a bare insert, held open) makes the PUT's insert wait,
    then fail on the key once it commits. That was a 500; the PUT now tries once more and
    finds the revision: a replay of the same rules (200), or other rules under it (409)."""
    tenant = f"{tenant}-pk{int(same)}"
    auth = await _auth(token_for, tenant)
    rules = _rules("eu-west")
    held_rules = rules if same else _rules("us-east")
    async with sessions() as held:
        async with held.begin():
            held.add(TenantPolicyRevisionRow(tenant_id=tenant, revision="r1", document=held_rules))
            await held.flush()
            put = asyncio.ensure_future(_put(http, auth, "r1", rules))
            await eventually(
                lambda: _waiting_on(sessions, "tenant_policy_revisions", 1), timeout=UNBOUNDED
            )
        answered = await put
    assert answered.status_code == (200 if same else 409), answered.text
    current = (await http.get(_URL, headers=auth)).json()
    if same:
        assert current["revision"] == "r1" and current["allowedRegions"] == ["eu-west"]
    else:
        assert answered.json()["field"] == "body.revision"
        assert current["revision"] == baseline_policy(tenant).revision  # nothing written
    assert await _history(sessions, tenant) == {"r1": frozenset(held_rules["allowedRegions"])}


async def _put_policy(
    sessions: async_sessionmaker[AsyncSession], tenant: str, revision: str, rules: dict[str, Any]
) -> None:
    async with sessions() as s, s.begin():
        await routing_settings.put_policy(s, tenant, revision, rules)


async def test_the_history_on_either_engine(store: async_sessionmaker[AsyncSession]) -> None:
    """The store's own check, on PostgreSQL and on SQLite (the embedded default)."""
    tenant = f"t-{uuid.uuid4().hex[:10]}"
    await _put_policy(store, tenant, "r1", _rules("eu-west"))
    await _put_policy(store, tenant, "r2", _rules("eu-north"))
    with pytest.raises(routing_settings.PolicyRevisionTaken):
        await _put_policy(store, tenant, "r1", _rules("us-east"))
    await _put_policy(store, tenant, "r1", _rules("eu-west"))
    async with store() as s:
        current = await s.get(TenantPolicyRow, tenant)
        assert current is not None and current.revision == "r1"
    assert await _history(store, tenant) == {
        "r1": frozenset({"eu-west"}),
        "r2": frozenset({"eu-north"}),
    }


async def test_a_current_policy_written_without_its_history_joins_it_when_replaced(
    store: async_sessionmaker[AsyncSession],
) -> None:
    """A process older than migration 0021 (a rolling upgrade) writes the current row alone:
    replaced by a newer process, that revision would have left no trace, free for other rules."""
    tenant = f"t-{uuid.uuid4().hex[:10]}"
    async with store() as s, s.begin():
        s.add(TenantPolicyRow(tenant_id=tenant, revision="old", document=_rules("eu-west")))
    await _put_policy(store, tenant, "next", _rules("eu-north"))
    with pytest.raises(routing_settings.PolicyRevisionTaken):
        await _put_policy(store, tenant, "old", _rules("us-east"))
    assert await _history(store, tenant) == {
        "old": frozenset({"eu-west"}),
        "next": frozenset({"eu-north"}),
    }


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
async def test_migration_0021_keeps_each_tenants_current_revision(
    engine: str, tmp_path: Path
) -> None:
    """The history starts from each tenant's current policy, as of when it was written: its
    revision is refused with other rules from the first PUT after the upgrade on."""
    url = (
        f"sqlite+aiosqlite:///{tmp_path}/revs.db"
        if engine == "sqlite"
        else await create_database("mr_policy_revs")
    )
    written = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    db = create_engine(url)
    sessions = session_factory(db)
    try:
        await asyncio.to_thread(upgrade, url, "0020")
        async with sessions() as s, s.begin():
            s.add(
                TenantPolicyRow(
                    tenant_id="t", revision="r7", document=_rules("eu-west"), updated_at=written
                )
            )
        await db.dispose()  # no connection open across the migrations
        await asyncio.to_thread(upgrade, url)
        async with sessions() as s:
            kept = await s.get(TenantPolicyRevisionRow, ("t", "r7"))
            assert kept is not None
            assert kept.document == _rules("eu-west") and kept.published_at == written
        with pytest.raises(routing_settings.PolicyRevisionTaken):
            await _put_policy(sessions, "t", "r7", _rules("us-east"))
        await db.dispose()
        # Down again: the history goes, each tenant's current policy stays.
        await asyncio.to_thread(downgrade, url, "0020")
        async with db.connect() as conn:
            tables = await conn.run_sync(lambda c: sa.inspect(c).get_table_names())
            current = (await conn.execute(sa.text("SELECT revision FROM tenant_policies"))).all()
        assert "tenant_policy_revisions" not in tables
        assert [tuple(r) for r in current] == [("r7",)]
    finally:
        await db.dispose()
        if engine == "postgresql":
            await drop_database(url)
