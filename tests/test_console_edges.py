"""The console's answers to what an operator runs into besides the happy path, over plain HTTP:
a shared link signing in to the page it names, pages (not problem+json) for a bad query value
or an unknown console path, a route preview with no profile to preview, a deployment's
thresholds from every active profile version, as the approval gate checks them, receipts in
pages, stored rows that no longer read shown as such, and the session cookie Secure in
production whatever scheme the request reports."""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import httpx
import pytest
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col
from temporalio.client import Client

from core.local_ports import free_port
from core.schedule_spec import period_minutes
from core.settings import Settings
from domain.enums import InvocationOutcome, UsageStatus
from store.db import transaction
from store.ops_tables import ProbeSampleRow
from store.tables import ModelDeploymentRow, ModelProfileRow
from tests.helpers.browser import ConsoleSession
from tests.helpers.catalog import (
    approved_deployment,
    profile_event,
    publish,
    record_evidence,
    register,
)
from tests.helpers.receipts import add_receipt, run_of
from tests.helpers.stack import serve


@pytest.fixture
async def console(api_url: str, cli_env: dict[str, str]) -> AsyncIterator[ConsoleSession]:
    session, answer = await ConsoleSession.sign_in(
        api_url, cli_env["MODEL_ROUTER_CLIENT_ID"], cli_env["MODEL_ROUTER_CLIENT_SECRET"]
    )
    assert answer.status_code == 303, answer.text
    yield session
    await session.close()


@pytest.fixture
async def auth(http: httpx.AsyncClient, cli_env: dict[str, str]) -> dict[str, str]:
    """The API's bearer header for the client the console signs in with (its tenant's)."""
    token = (
        await http.post(
            "/oauth/token",
            data={"grant_type": "client_credentials"},
            auth=(cli_env["MODEL_ROUTER_CLIENT_ID"], cli_env["MODEL_ROUTER_CLIENT_SECRET"]),
        )
    ).json()["access_token"]
    return {"Authorization": f"Bearer {token}"}


def _page(resp: httpx.Response, status: int) -> str:
    assert resp.status_code == status, resp.text[:300]
    assert resp.headers["content-type"].startswith("text/html"), resp.headers["content-type"]
    assert 'href="/console"' in resp.text  # the navigation: a way back
    return resp.text


async def test_a_shared_link_signs_in_to_the_page_it_names(http: httpx.AsyncClient) -> None:
    # The address without its query was kept: a deployment page with no id was a 422.
    resp = await http.get("/console/deployment?id=team/coder&done=approve")
    assert resp.status_code == 303
    assert resp.headers["location"] == (
        "/console/sign-in?next=/console/deployment%3Fid%3Dteam/coder%26done%3Dapprove"
    )


async def test_bad_values_and_unknown_pages_are_pages_not_problems(
    console: ConsoleSession, http: httpx.AsyncClient
) -> None:
    assert "window" in _page(await console.get("/console/overview", window="month"), 400)
    assert "id" in _page(await console.get("/console/deployment"), 400)
    assert "No such page" in _page(await console.get("/console/nowhere"), 404)
    # The API's own paths keep their problem+json.
    api = await http.get("/factory/nowhere")
    assert api.status_code == 404
    assert api.headers["content-type"] == "application/problem+json"


async def test_hand_made_form_posts_are_refused_as_pages_never_500s(
    console: ConsoleSession, api_url: str
) -> None:
    # compare_digest raises on a str that is not ASCII, and PostgreSQL refuses a NUL in a
    # text value: each was a 500 (the first to anyone, signed in or not).
    async with httpx.AsyncClient(base_url=api_url) as plain:
        page = await plain.get("/console/sign-in")
        forged = await plain.post(
            "/console/sign-in", data={"client_id": "x", "client_secret": "y", "login_nonce": "é"}
        )
    assert forged.status_code == 403 and "expired" in forged.text, page.status_code
    foreign = await console.post("/console/deployment/retire", {"csrf_token": "é", "id": "a"})
    assert "CSRF" in _page(foreign, 403)
    nul = await console.post(
        "/console/deployment/retire", {"csrf_token": console.csrf, "id": "team/a\x00b"}
    )
    assert "NUL" in _page(nul, 400)


async def test_a_preview_with_no_profile_to_preview_says_so(console: ConsoleSession) -> None:
    # The form's list is empty for a tenant with no active profile, so nothing is sent for it:
    # that was a problem+json 422 naming body.profile_id.
    resp = await console.post("/console/preview", {"csrf_token": console.csrf})
    assert "no active profile to preview" in _page(resp, 422)


async def test_a_deployments_thresholds_are_every_active_versions(
    console: ConsoleSession,
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    temporal_client: Client,
) -> None:
    # Version 2 asks less than version 1, which stays active: the page showed version 2's
    # columns alone, every cell met, while approval was refused by version 1's threshold.
    await register(http, auth, "edge/coder")
    for version, threshold in (("1", 0.9), ("2", 0.7)):
        event = profile_event(
            "edge-agent", ["edge/coder"], {"tool-calling": threshold}, version=version
        )
        assert (await publish(http, auth, event)).status_code == 200
    await record_evidence(temporal_client, tenant, "edge/coder", {"tool-calling": 0.8})
    html = _page(await console.get("/console/deployment", id="edge/coder"), 200)
    assert "edge-agent</a> v1" in html and "edge-agent</a> v2" in html
    assert html.count('class="short"') == 1  # version 1's 0.9; version 2's 0.7 is met
    refused = await http.post("/factory/model-deployments/edge/coder/approve", headers=auth)
    assert refused.status_code == 409 and "0.9" in refused.text
    # Each column opens the version it names (it opened the newest whatever was clicked),
    # and the versions table links each.
    link = re.search(r'href="(/console/profiles/edge-agent\?version=1)"', html)
    assert link is not None, html
    first = _page(await console.get(link.group(1).replace("&amp;", "&")), 200)
    assert '<span id="version">1</span>' in first and "?version=2" in first


def _ids(html: str) -> list[str]:
    return re.findall(r'data-receipt="([0-9a-f-]+)"', html)


async def test_receipts_come_in_pages_and_a_bad_run_id_keeps_the_filters(
    console: ConsoleSession, sessions: async_sessionmaker[AsyncSession], tenant: str
) -> None:
    # A run of more than a page: the console showed its newest 100, the rest out of reach.
    run_id, oldest_first = await run_of(sessions, tenant, 103)
    newest_first = oldest_first[::-1]
    first = _page(await console.get("/console/receipts", run_id=str(run_id)), 200)
    older = re.search(r'id="older" href="([^"]+)"', first)
    assert older is not None and _ids(first) == newest_first[:100]
    second = _page(await console.get(older.group(1).replace("&amp;", "&")), 200)
    assert _ids(second) == newest_first[100:] and 'id="older"' not in second

    # A run id that is no UUID is said beside its field; the other filters stay as chosen.
    bad = _page(await console.get("/console/receipts", run_id="not-a-run", outcome="Failed"), 400)
    assert 'id="f-run-error"' in bad and 'value="not-a-run"' in bad
    assert '<option value="Failed" selected>' in bad


async def test_a_call_in_flight_is_in_flight_and_costs_read_as_dollars(
    console: ConsoleSession, sessions: async_sessionmaker[AsyncSession], tenant: str
) -> None:
    """An open receipt holds its claim's placeholders, Failed and usage Unknown: the console
    showed a call still answering as a failure, and listed it under Failed. A cost is fixed
    point: a Decimal's own text was `0E-8` and `1.2E-7`."""
    run = uuid.uuid4()
    now = datetime.now(UTC)
    ids = {}
    for name, outcome, cost, open_ in (
        ("open", InvocationOutcome.FAILED, None, True),
        ("failed", InvocationOutcome.FAILED, Decimal("0"), False),
        ("tiny", InvocationOutcome.COMPLETED, Decimal("0.00000012"), False),
    ):
        ids[name] = await add_receipt(
            sessions, tenant=tenant, deployment_id="edge/in-flight", started_at=now,
            usage_status=UsageStatus.UNKNOWN if open_ else UsageStatus.REPORTED,
            outcome=outcome, estimated_cost_usd=cost, open_=open_, run_id=run,
        )  # fmt: skip
    listed = _page(await console.get("/console/receipts", run_id=str(run)), 200)
    rows = {
        name: re.search(rf'data-receipt="{ids[name]}">(.*?)</tr>', listed, re.S).group(1)  # type: ignore[union-attr]
        for name in ids
    }
    assert "In flight" in rows["open"] and "outcome-failed" not in rows["open"]
    # Each row links its profile and its deployment.
    assert 'href="/console/deployment?id=edge/in-flight"' in rows["open"]
    assert 'href="/console/profiles/code-agent"' in rows["open"]
    assert "outcome-failed" in rows["failed"] and "<td>0.00</td>" in rows["failed"]
    assert "<td>0.00000012</td>" in rows["tiny"] and "E-" not in listed
    failed = _page(await console.get("/console/receipts", run_id=str(run), outcome="Failed"), 200)
    assert _ids(failed) == [str(ids["failed"])]
    one = _page(await console.get(f"/console/receipts/{ids['open']}"), 200)
    assert "In flight" in one and "outcome-failed" not in one
    tiny = _page(await console.get(f"/console/receipts/{ids['tiny']}"), 200)
    assert "0.00000012" in tiny and "E-" not in tiny


async def test_a_deployment_offers_the_actions_its_state_takes(
    console: ConsoleSession, http: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    """Every action was offered in every state: Approve on a Candidate or a Retired
    deployment, whose click could only be refused. An evaluation, once asked, is said to have
    started (it said "done")."""
    target = f"edge-{uuid.uuid4().hex[:6]}/acts"
    await register(http, auth, target)

    def offered(html: str) -> set[str]:
        return set(re.findall(r'id="action-(\w+)"', html))

    candidate = _page(await console.get("/console/deployment", id=target), 200)
    assert offered(candidate) == {"license", "evaluate", "retire"}
    started = _page(await console.get("/console/deployment", id=target, done="evaluate"), 200)
    assert "Evaluate: started" in started and ": done" not in started
    assert (await http.post(f"/factory/model-deployments/{target}/retire", headers=auth)).is_success
    retired = _page(await console.get("/console/deployment", id=target), 200)
    assert offered(retired) == set() and 'id="no-actions"' in retired


async def test_a_probe_says_how_old_it_is_and_an_old_one_is_stale(
    console: ConsoleSession,
    http: httpx.AsyncClient,
    auth: dict[str, str],
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    temporal_client: Client,
) -> None:
    """With probes stopped (the schedule paused or deleted), the last "ok · 45 ms" stayed on
    the board and the deployment's page with no time, as if current. Stale is judged against
    the probe schedule's period, and only for a state that is probed: a Candidate keeps its
    last sample without being probed."""
    probed, unprobed = (f"edge-{uuid.uuid4().hex[:6]}/{n}" for n in ("probed", "candidate"))
    await approved_deployment(http, auth, temporal_client, tenant, probed)
    await register(http, auth, unprobed)
    at = datetime.now(UTC) - timedelta(days=3, minutes=5)
    async with sessions() as session:
        for target in (probed, unprobed):
            session.add(
                ProbeSampleRow(
                    tenant_id=tenant, deployment_id=target, window_start=at, probed_at=at,
                    outcome="ok", latency_ms=45,
                )
            )  # fmt: skip
        await session.commit()
    page = _page(await console.get("/console/deployment", id=probed), 200)
    assert re.search(r'id="probed-at"[^>]*>3 d ago</time> <span class="badge bad stale">', page)
    quiet = _page(await console.get("/console/deployment", id=unprobed), 200)
    assert "3 d ago" in quiet and "stale" not in quiet
    board = _page(await console.get("/console"), 200)
    card = board[board.index(f'data-deployment="{probed}"') :][:2000]
    assert "45 ms · <time" in card and "3 d ago" in card and "stale" in card


async def test_stored_rows_that_do_not_read_are_shown_as_such_not_a_500(
    console: ConsoleSession,
    http: httpx.AsyncClient,
    auth: dict[str, str],
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
) -> None:
    """A license with a key the model forbids (written before the rule, or by hand) made the
    board, the deployment's page and its actions' answers 500s; a profile whose thresholds do
    not read made the profile list, its own page and every page of a deployment it lists
    500s. Each is shown as an unreadable stored record, the other rows as before."""
    hexa = uuid.uuid4().hex[:6]
    broken, fine = f"edge-{hexa}/unreadable", f"edge-{hexa}/fine"
    for target in (broken, fine):
        await register(http, auth, target)
    profile = f"edge-{hexa}-unreadable"
    event = profile_event(profile, [fine], {"tool-calling": 0.8})
    assert (await publish(http, auth, event)).status_code == 200
    async with transaction(sessions) as session:
        await session.execute(
            update(ModelDeploymentRow)
            .where(col(ModelDeploymentRow.tenant_id) == tenant)
            .where(col(ModelDeploymentRow.deployment_id) == broken)
            .values(license_metadata={"commercialUse": True, "legacyTerm": True})
        )
        await session.execute(
            update(ModelProfileRow)
            .where(col(ModelProfileRow.tenant_id) == tenant)
            .where(col(ModelProfileRow.profile_id) == profile)
            .values(required_capabilities={"tool-calling": "high"})
        )
    board = _page(await console.get("/console"), 200)
    card = board[board.index(f'data-deployment="{broken}"') - 40 :][:600]
    assert 'class="card unreadable"' in card and "unreadable stored record" in card
    assert f'<li class="card" data-deployment="{fine}">' in board
    page = _page(await console.get("/console/deployment", id=broken), 200)
    assert 'id="unreadable"' in page and "legacyTerm" in page and "correct the row" in page
    assert '<span class="badge state" id="state">Candidate</span>' in page
    # An action on it is refused by the lifecycle, on the same page.
    refused = await console.post(
        "/console/deployment/approve", {"id": broken, "csrf_token": console.csrf}
    )
    answer = _page(refused, 409)
    assert "Refused (409)" in answer and 'id="unreadable"' in answer
    # The profile: marked in the list, named on its deployment's page, its own page a refusal.
    listed = _page(await console.get("/console/profiles"), 200)
    assert re.search(rf'<tr class="unreadable"><th scope="row">{profile}</th><td>1</td>', listed)
    assert "unreadable stored record" in listed
    lister = _page(await console.get("/console/deployment", id=fine), 200)
    assert 'class="alert unreadable-profile"' in lister and profile in lister
    own = _page(await console.get(f"/console/profiles/{profile}"), 409)
    assert "does not read" in own and "correct the row" in own


async def test_the_session_cookie_is_secure_in_production_over_plain_http(
    settings: Settings, cli_env: dict[str, str]
) -> None:
    """The cookie is a full API bearer token. Secure only when the request's scheme was https,
    it went over plain HTTP behind a TLS-terminating proxy whose X-Forwarded-Proto uvicorn
    was not told to trust (the shipped manifests leave --forwarded-allow-ips out)."""
    production = settings.model_copy(
        update={
            "environment": "production",
            # An API of its own without Temporal (the sign-in reads the store only): on the
            # suite's client and queues, its workers would poll beside the suite's API's.
            "temporal_address": f"127.0.0.1:{free_port()}",
            "temporal_connect_timeout_seconds": 1.0,
        }
    )
    async with (
        serve(production) as served,
        httpx.AsyncClient(base_url=served.url, timeout=30) as plain,
    ):
        form = await plain.get("/console/sign-in")
        (login,) = form.headers.get_list("set-cookie")
        assert login.startswith("mr_console_login=") and "secure" in login.lower()
        nonce = re.search(r'name="login_nonce" value="([^"]*)"', form.text)
        assert nonce is not None
        # A Secure cookie is not sent back over plain HTTP by a client: sent by hand, as the
        # browser behind the proxy (on https) sends it.
        answer = await plain.post(
            "/console/sign-in",
            data={
                "client_id": cli_env["MODEL_ROUTER_CLIENT_ID"],
                "client_secret": cli_env["MODEL_ROUTER_CLIENT_SECRET"],
                "login_nonce": nonce.group(1),
            },
            headers={"Cookie": f"mr_console_login={nonce.group(1)}"},
        )
    assert answer.status_code == 303, answer.text[:300]
    (session,) = (c for c in answer.headers.get_list("set-cookie") if c.startswith("mr_console="))
    assert "secure" in session.lower() and "httponly" in session.lower()


def test_a_schedules_period_is_read_from_its_cron() -> None:
    assert period_minutes("*/2 * * * *") == 2 and period_minutes("* * * * *") == 1
    assert period_minutes("30 * * * *") == 60 and period_minutes("0 */6 * * *") == 360
    assert period_minutes("0 3 * * *") == 24 * 60 and period_minutes("0 3 * * 1") == 7 * 24 * 60
