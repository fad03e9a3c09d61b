"""The operator console in a real headless Chromium: sign-in, the demo catalog on the board,
license → evaluate (live progress) → approve with the API's refusal text, the route preview's
exclusion reasons, an openai-SDK invocation on the receipts page with its usage badge, the
overview's charts, the schedules, roles (an Observer changes nothing), tenant isolation, and
CSRF. Every page visited is screenshotted and checked with axe-core (tests/helpers/browser.py).

The demo catalog is `make dev`'s own seed (cli/dev_seed.py), run against this test API and the
local upstream simulator."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

import httpx
import pytest
from openai import AsyncOpenAI
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client

from cli.dev_seed import seed
from core.schedules import NAMES, ensure_schedules, schedule_id
from core.security import new_client_secret
from core.settings import Settings
from domain.enums import Capability, Role, Scope, UsageStatus
from domain.health import ProbeOutcome, ProbeResult
from domain.suite import Suite
from providers.upstream import Fault, FaultKind, UpstreamServer
from providers.upstream.suite_responders import competent_responder, failing_responder
from store.clients import upsert_client
from store.db import transaction
from store.probes import record_sample
from store.tables import InvocationReceiptRow
from tests.helpers.browser import (
    ConsoleSession,
    audit,
    sign_in,
    start_browser,
    tab_to,
    text,
    wait_for_text,
)
from tests.helpers.catalog import profile_event, publish, record_evidence, register
from tests.helpers.deadline import eventually, wait_until
from tests.helpers.receipts import add_receipt
from tests.helpers.stack import serve


@dataclass(frozen=True)
class Client_:
    client_id: str
    secret: str
    tenant: str

    def bearer(self, token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}


async def _client(
    sessions: async_sessionmaker[AsyncSession], tenant: str, roles: list[Role]
) -> Client_:
    client = Client_(f"console-{uuid.uuid4().hex[:8]}", new_client_secret(), tenant)
    await upsert_client(
        sessions,
        tenant_id=tenant,
        client_id=client.client_id,
        secret=client.secret,
        roles=roles,
        scopes=list(Scope),
    )
    return client


async def _token(api_url: str, client: Client_) -> str:
    async with httpx.AsyncClient(base_url=api_url) as http:
        resp = await http.post(
            "/oauth/token",
            data={"grant_type": "client_credentials"},
            auth=(client.client_id, client.secret),
        )
    resp.raise_for_status()
    return str(resp.json()["access_token"])


@pytest.fixture(scope="module")
async def upstream() -> AsyncIterator[UpstreamServer]:
    async with UpstreamServer() as server:
        suite = Suite()
        server.register("*", competent_responder(suite))
        server.register("bad-sim", failing_responder(suite, {Capability.TOOL_CALLING}))
        # Slow enough that the page polls the evaluation's progress more than once (52 cases,
        # 4 at a time, about 3 s in all), far below any timeout.
        server.inject("bad-sim", Fault(kind=FaultKind.SLOW_FIRST_TOKEN, delay=0.25))
        yield server


@dataclass(frozen=True)
class Demo:
    tenant: str
    admin: Client_
    auth: dict[str, str]


@pytest.fixture(scope="module")
async def demo(
    api_url: str, sessions: async_sessionmaker[AsyncSession], upstream: UpstreamServer
) -> Demo:
    """A tenant seeded exactly as `make dev` seeds its demo tenant."""
    tenant = f"demo-{uuid.uuid4().hex[:8]}"
    admin = await _client(sessions, tenant, [Role.PLATFORM_ADMIN])
    approved = await asyncio.to_thread(
        seed, api_url, admin.client_id, admin.secret, upstream.endpoint_ref
    )
    assert approved == ["local/sim-chat", "local/sim-claude", "local/sim-embed"]
    return Demo(tenant, admin, admin.bearer(await _token(api_url, admin)))


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    driver = start_browser()
    try:
        yield driver
    finally:
        driver.quit()


def _open(driver: WebDriver, url: str) -> None:
    driver.get(url)
    wait_until(lambda: driver.find_elements(By.TAG_NAME, "h1"), timeout=20)


async def test_sign_in_refuses_a_wrong_secret_and_accepts_the_right_one(
    api_url: str, demo: Demo, browser: WebDriver
) -> None:
    def steps() -> None:
        browser.delete_all_cookies()
        _open(browser, f"{api_url}/console")  # not signed in: sent to the sign-in page
        assert "/console/sign-in" in browser.current_url
        audit(browser, "sign-in")
        browser.find_element(By.ID, "client_id").send_keys(demo.admin.client_id)
        browser.find_element(By.ID, "client_secret").send_keys("not-the-secret")
        browser.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
        wait_for_text(browser, "sign-in-error", "wrong secret")
        assert browser.get_cookie("mr_console") is None
        # The id typed is kept (the secret never is).
        assert (
            browser.find_element(By.ID, "client_id").get_attribute("value") == demo.admin.client_id
        )
        assert browser.find_element(By.ID, "client_secret").get_attribute("value") == ""
        audit(browser, "sign-in-refused")
        # Keyboard only: the id field has focus, Tab moves on, Enter submits.
        browser.find_element(By.ID, "client_id").clear()
        browser.find_element(By.ID, "client_id").click()
        active = browser.switch_to.active_element
        active.send_keys(demo.admin.client_id, Keys.TAB)
        browser.switch_to.active_element.send_keys(demo.admin.secret, Keys.ENTER)
        wait_for_text(browser, "tenant", demo.tenant)
        cookie = browser.get_cookie("mr_console")
        assert cookie is not None and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        assert cookie["path"] == "/console" and not cookie["secure"]  # plain HTTP here
        # Signing out ends the session.
        browser.find_element(By.CSS_SELECTOR, ".who button[type=submit]").click()
        wait_until(lambda: "/console/sign-in" in browser.current_url)
        assert browser.get_cookie("mr_console") is None
        _open(browser, f"{api_url}/console/receipts")
        assert "/console/sign-in" in browser.current_url
        # A shared link signs in to the page it names, query and all: it signed in to the
        # address without its query (a deployment page with no id was a 422).
        _open(browser, f"{api_url}/console/receipts?outcome=Failed&usage_status=Unknown")
        browser.find_element(By.ID, "client_id").send_keys(demo.admin.client_id)
        browser.find_element(By.ID, "client_secret").send_keys(demo.admin.secret, Keys.ENTER)
        wait_for_text(browser, "tenant", demo.tenant)
        assert browser.current_url.endswith("/console/receipts?outcome=Failed&usage_status=Unknown")

    await asyncio.to_thread(steps)


async def test_board_shows_the_demo_catalog_with_counts(
    api_url: str,
    demo: Demo,
    browser: WebDriver,
    sessions: async_sessionmaker[AsyncSession],
    http: httpx.AsyncClient,
) -> None:
    # An id as long as ids go, with no space to break at: it ran past its card into the next
    # column, and past the page's heading.
    long_id = f"long-{uuid.uuid4().hex[:6]}/" + "x" * 180
    await register(http, demo.auth, long_id)
    # A probe of sim-chat, as the health probe's activity records it.
    async with transaction(sessions) as session:
        await record_sample(
            session,
            ProbeResult(
                tenant_id=demo.tenant,
                deployment_id="local/sim-chat",
                outcome=ProbeOutcome.OK,
                latency_ms=37,
            ),
            datetime.now(UTC).replace(second=0, microsecond=0),
            1,
        )

    def steps() -> None:
        sign_in(browser, api_url, demo.admin.client_id, demo.admin.secret)
        _open(browser, f"{api_url}/console")
        approved = browser.find_element(By.ID, "col-Approved").find_element(By.XPATH, "..")
        cards = approved.find_elements(By.CSS_SELECTOR, "li.card")
        shown = {c.get_attribute("data-deployment") for c in cards}
        assert {"local/sim-chat", "local/sim-claude", "local/sim-embed"} <= shown
        count = browser.find_element(By.CSS_SELECTOR, ".count[data-state=Approved]").text
        assert int(count) == len(cards)
        chat = approved.find_element(By.CSS_SELECTOR, "li.card[data-deployment='local/sim-chat']")
        assert "local-upstream / sim-chat" in chat.text and "Local" in chat.text
        assert "healthy" in chat.text and "commercial" in chat.text
        assert "ok · 37 ms" in chat.text
        overflowing = browser.execute_script(
            "return [...document.querySelectorAll('li.card, h1')]"
            ".filter(e => e.scrollWidth > e.clientWidth + 1).length;"
        )
        assert overflowing == 0, "a card or the heading runs past its box"
        audit(browser, "board")
        # The profiles and a profile's page.
        _open(browser, f"{api_url}/console/profiles")
        assert "code-agent" in text(browser, "profiles")
        audit(browser, "profiles")
        browser.find_element(By.LINK_TEXT, "code-agent").click()
        wait_for_text(browser, "allowed", "local/sim-claude")
        rows = browser.find_elements(By.CSS_SELECTOR, "#allowed tbody tr")
        assert [r.find_element(By.TAG_NAME, "th").text for r in rows] == [
            "local/sim-chat",
            "local/sim-claude",
        ]
        assert "tool-calling" in text(browser, "limits")
        audit(browser, "profile")

    await asyncio.to_thread(steps)


async def test_license_evaluate_with_live_progress_then_approval_refused_with_the_reasons(
    api_url: str, http: httpx.AsyncClient, demo: Demo, browser: WebDriver, upstream: UpstreamServer
) -> None:
    lab = f"lab-{uuid.uuid4().hex[:6]}"
    bad = f"{lab}/bad"
    await register(
        http,
        demo.auth,
        bad,
        model="bad-sim",
        endpointRef=upstream.endpoint_ref,
        region="local",
        privacyClass="Local",
        licenseMetadata=None,
    )
    event = profile_event(
        lab, [bad], {"tool-calling": 0.8}, privacyClass="Local", allowedRegions=["local"]
    )
    assert (await publish(http, demo.auth, event)).status_code == 200
    page = f"{api_url}/console/deployment?id={bad}"

    def steps() -> None:
        sign_in(browser, api_url, demo.admin.client_id, demo.admin.secret)
        _open(browser, page)
        assert "No license metadata" in text(browser, "license")
        # Record the license, through its confirmation page.
        browser.find_element(By.ID, "action-license").click()
        wait_until(lambda: browser.find_elements(By.ID, "license_name"))
        audit(browser, "confirm-license")
        browser.find_element(By.ID, "license_name").send_keys("Apache-2.0")
        browser.find_element(By.ID, "term-commercialUse").click()
        browser.find_element(By.ID, "confirm").click()
        wait_for_text(browser, "done", "Record license")
        license_ = text(browser, "license")
        assert "Apache-2.0" in license_ and "Commercial use permitted" in license_
        # Evaluate: the panel follows the run live until it ends.
        browser.find_element(By.ID, "action-evaluate").click()
        wait_until(lambda: browser.find_elements(By.ID, "confirm"))
        audit(browser, "confirm-evaluate")
        browser.find_element(By.ID, "confirm").click()
        wait_for_text(browser, "done", "Evaluate")
        seen: list[str] = []

        def finished() -> bool:
            # One read of the panel in the page: the script may swap it between two reads.
            status, bar = browser.execute_script(
                "const s = document.getElementById('evaluation-status');"
                "const p = document.getElementById('evaluation-progress');"
                "return [s ? s.textContent : null, p ? p.value + '/' + p.max : null];"
            )
            if bar:
                seen.append(bar)
            return bool(status == "Completed")

        wait_until(finished, timeout=150, interval=0.3)
        assert seen, "the page never showed the evaluation's progress"
        assert len(set(seen)) >= 2, f"the progress never moved on the page: {seen}"
        # The page itself follows, unasked: the state and the scores outside the panel were
        # those from before the run until the operator reloaded.
        wait_until(
            lambda: browser.execute_script(
                "const s = document.getElementById('state');"
                "return Boolean(s && s.textContent === 'Evaluated'"
                " && document.getElementById('scores') && !document.getElementById('done'));"
            )
        )
        short = browser.find_elements(By.CSS_SELECTOR, "#scores td.short")
        assert short and "tool-calling" in short[0].text, "the shortfall is not highlighted"
        rows = browser.find_elements(By.CSS_SELECTOR, "#scores tbody tr")
        assert len(rows) == len(Capability) == 13
        assert text(browser, "state") == "Evaluated"
        audit(browser, "deployment")
        # Approve: refused, every refusal in the API's words.
        browser.find_element(By.ID, "action-approve").click()
        wait_until(lambda: browser.find_elements(By.ID, "use-commercialUse"))
        audit(browser, "confirm-approve")
        browser.find_element(By.ID, "use-redistribution").click()  # a term the license lacks
        browser.find_element(By.ID, "confirm").click()
        refusal = wait_for_text(browser, "refusal", "Approval refused")
        assert f"profile {lab} requires tool-calling >= 0.8; measured" in refusal
        assert "the license does not permit redistribution" in refusal
        rows = browser.find_elements(By.CSS_SELECTOR, "#refusal tr.refusal")
        cells = [[td.text for td in r.find_elements(By.TAG_NAME, "td")] for r in rows]
        assert ["the license does not permit redistribution", "", "", "", "", "redistribution"] in (
            cells
        )
        assert any(c[1:4] == [lab, "tool-calling", "0.8"] and c[4] for c in cells), cells
        assert text(browser, "state") == "Evaluated"
        audit(browser, "approval-refused")

    await asyncio.to_thread(steps)
    body = (await http.get(f"/factory/model-deployments/{bad}", headers=demo.auth)).json()
    assert body["state"] == "Evaluated"
    assert body["licenseMetadata"]["licenseName"] == "Apache-2.0"


async def test_approving_a_deployment_that_meets_every_threshold(
    api_url: str, http: httpx.AsyncClient, demo: Demo, browser: WebDriver, temporal_client: Client
) -> None:
    lab = f"lab-{uuid.uuid4().hex[:6]}"
    good = f"{lab}/good"
    await register(http, demo.auth, good, region="local", privacyClass="Local")
    event = profile_event(
        lab, [good], {"tool-calling": 0.8}, privacyClass="Local", allowedRegions=["local"]
    )
    assert (await publish(http, demo.auth, event)).status_code == 200
    await record_evidence(temporal_client, demo.tenant, good, {"tool-calling": 0.9})

    def steps() -> None:
        sign_in(browser, api_url, demo.admin.client_id, demo.admin.secret)
        _open(browser, f"{api_url}/console/deployment?id={good}")
        assert not browser.find_elements(By.CSS_SELECTOR, "#scores td.short")
        # By keyboard only: the first Tab reaches the skip link, which moves focus to the
        # content; Tab reaches the action, Enter opens its confirmation, Tab and Enter confirm.
        ActionChains(browser).send_keys(Keys.TAB).perform()
        assert browser.switch_to.active_element.text == "Skip to content"
        ActionChains(browser).send_keys(Keys.ENTER).perform()
        wait_until(lambda: browser.switch_to.active_element.get_attribute("id") == "main")
        tab_to(browser, "action-approve")
        ActionChains(browser).send_keys(Keys.ENTER).perform()
        wait_until(lambda: browser.find_elements(By.ID, "confirm"))
        tab_to(browser, "confirm")
        ActionChains(browser).send_keys(Keys.ENTER).perform()
        wait_for_text(browser, "done", "Approve")
        assert text(browser, "state") == "Approved"
        history = text(browser, "history")
        assert "Candidate" in history and "Evaluated" in history and "Approved" in history

    await asyncio.to_thread(steps)


async def test_route_preview_shows_kept_candidates_and_exclusion_reasons(
    api_url: str, http: httpx.AsyncClient, demo: Demo, browser: WebDriver
) -> None:
    lab = f"lab-{uuid.uuid4().hex[:6]}"
    candidate = f"{lab}/candidate"
    await register(http, demo.auth, candidate, region="local", privacyClass="Local")
    event = profile_event(
        lab,
        ["local/sim-chat", candidate],
        {"tool-calling": 0.8},
        privacyClass="Local",
        allowedRegions=["local"],
    )
    assert (await publish(http, demo.auth, event)).status_code == 200

    def steps() -> None:
        sign_in(browser, api_url, demo.admin.client_id, demo.admin.secret)
        _open(browser, f"{api_url}/console/preview")
        audit(browser, "preview-form")
        browser.find_element(By.CSS_SELECTOR, f"#profile_id option[value='{lab}']").click()
        browser.find_element(By.ID, "needs_tools").click()
        browser.find_element(By.ID, "preview-submit").click()
        kept = wait_for_text(browser, "kept", "local/sim-chat")
        assert candidate not in kept
        excluded = browser.find_element(By.ID, "excluded")
        row = excluded.find_element(By.XPATH, f".//tr[th='{candidate}']")
        assert "not_approved" in row.text or "not-approved" in row.text
        assert "deployment is Candidate, not Approved" in row.text
        audit(browser, "preview")
        # A bad value is named, not a 500.
        browser.find_element(By.ID, "context_tokens").send_keys("-5")
        browser.find_element(By.ID, "preview-submit").click()
        wait_for_text(browser, "preview-error", "contextTokens")

    await asyncio.to_thread(steps)


async def test_an_openai_sdk_call_appears_on_the_receipts_page_with_its_badge(
    api_url: str, demo: Demo, browser: WebDriver
) -> None:
    run_id = str(uuid.uuid4())
    token = demo.auth["Authorization"].removeprefix("Bearer ")
    async with AsyncOpenAI(base_url=f"{api_url}/v1", api_key=token, max_retries=0) as sdk:
        answer = await sdk.chat.completions.with_raw_response.create(
            model="code-agent",
            messages=[{"role": "user", "content": "console receipts, please"}],
            extra_headers={"X-Run-Id": run_id},
        )
    receipt_id = answer.headers["x-model-router-receipt-id"]

    def steps() -> None:
        sign_in(browser, api_url, demo.admin.client_id, demo.admin.secret)
        _open(browser, f"{api_url}/console/receipts")
        row = browser.find_element(By.CSS_SELECTOR, f"tr.receipt[data-receipt='{receipt_id}']")
        badge = row.find_element(By.CSS_SELECTOR, ".badge.usage")
        assert badge.get_attribute("data-usage") == "Reported" and "Reported" in badge.text
        assert "Completed" in row.text and "code-agent" in row.text
        audit(browser, "receipts")
        # Filters: by outcome and usage status it stays, by another usage status it goes.
        browser.find_element(By.CSS_SELECTOR, "#f-usage option[value='Unknown']").click()
        browser.find_element(By.ID, "apply-filters").click()
        wait_until(lambda: "usage_status=Unknown" in browser.current_url)
        assert not browser.find_elements(By.CSS_SELECTOR, f"tr[data-receipt='{receipt_id}']")
        _open(browser, f"{api_url}/console/receipts?outcome=Completed&usage_status=Reported")
        assert browser.find_elements(By.CSS_SELECTOR, f"tr[data-receipt='{receipt_id}']")
        # The run's receipts, then the receipt itself with every field.
        _open(browser, f"{api_url}/console/receipts?run_id={run_id}")
        rows = browser.find_elements(By.CSS_SELECTOR, "tr.receipt")
        assert [r.get_attribute("data-receipt") for r in rows] == [receipt_id]
        rows[0].find_element(By.TAG_NAME, "a").click()
        fields = wait_for_text(browser, "fields", "requestHash")
        for name in ("invocationId", "runId", "deploymentId", "outputArtifactRef", "usageStatus"):
            assert name in fields
        assert receipt_id in fields and run_id in fields and "sha256:" in fields
        # Beyond the spec's fields: which provider attempt answered, and whether its answer was
        # held until complete (a non-stream caller's always is, domain/buffering.py).
        cells = {
            row.find_element(By.TAG_NAME, "th").text: row.find_element(By.TAG_NAME, "td").text
            for row in browser.find_elements(By.CSS_SELECTOR, "#fields tbody tr")
        }
        assert cells["providerAttempt"] == "1" and cells["buffered"] == "True", cells
        assert "console receipts, please" not in browser.page_source
        audit(browser, "receipt")

    await asyncio.to_thread(steps)


async def test_overview_draws_the_store_as_charts(
    api_url: str, demo: Demo, browser: WebDriver
) -> None:
    token = demo.auth["Authorization"].removeprefix("Bearer ")
    async with AsyncOpenAI(base_url=f"{api_url}/v1", api_key=token, max_retries=0) as sdk:
        await sdk.chat.completions.create(
            model="code-agent", messages=[{"role": "user", "content": "one for the chart"}]
        )

    def steps() -> None:
        sign_in(browser, api_url, demo.admin.client_id, demo.admin.secret)
        for window in ("24h", "7d"):
            _open(browser, f"{api_url}/console/overview?window={window}")
            bars = browser.find_elements(By.CSS_SELECTOR, "#chart-rate rect title")
            assert any("Completed" in (b.get_attribute("textContent") or "") for b in bars), (
                "no Completed bar in the rate chart"
            )
            latency = text(browser, "latency")
            assert "local/sim-chat" in latency or "local/sim-claude" in latency
            assert browser.find_elements(By.CSS_SELECTOR, "#chart-latency rect")
            assert "code-agent" in text(browser, "spend")
            assert browser.find_elements(By.CSS_SELECTOR, "#chart-awaiting")
            audit(browser, f"overview-{window}")

    await asyncio.to_thread(steps)


@pytest.fixture
async def schedules(temporal_client: Client, settings: Settings) -> AsyncIterator[list[str]]:
    """The two schedules under the API's own prefix, pointed at a queue nobody polls (a run
    would probe every tenant of the session otherwise); deleted afterwards. The worker that made
    them had a probe cron of its own, not the API's."""
    queue = f"console-unpolled-{uuid.uuid4().hex[:8]}"
    worker_settings = settings.model_copy(update={"health_probe_cron": "*/7 * * * *"})
    await ensure_schedules(temporal_client, worker_settings, task_queue=queue)
    ids = [schedule_id(settings, n) for n in NAMES]
    yield ids
    for sid in ids:
        await temporal_client.get_schedule_handle(sid).delete()
    async for wf in temporal_client.list_workflows(f"TaskQueue = '{queue}'"):
        await temporal_client.get_workflow_handle(wf.id, run_id=wf.run_id).terminate()


async def test_schedules_show_last_and_next_run_and_admins_run_them_now(
    demo: Demo,
    browser: WebDriver,
    sessions: async_sessionmaker[AsyncSession],
    settings: Settings,
    temporal_client: Client,
    schedules: list[str],
) -> None:
    observer = await _client(sessions, demo.tenant, [Role.OBSERVER])
    probe = schedule_id_of(schedules, "deployment-health-probe")
    # An API of its own whose settings list the demo tenant as a platform tenant, as `make dev`
    # lists its own (the suite's lists none); its invocation worker on a queue of its own.
    own = settings.model_copy(
        update={
            "platform_tenants": [demo.tenant],
            "temporal_invocation_task_queue": f"console-schedules-{uuid.uuid4().hex[:8]}",
        }
    )

    def steps(api_url: str) -> None:
        sign_in(browser, api_url, demo.admin.client_id, demo.admin.secret)
        _open(browser, f"{api_url}/console/schedules")
        row = browser.find_element(By.CSS_SELECTOR, "tr[data-schedule='deployment-health-probe']")
        # As on the server, not as the API's own settings say (*/2).
        assert "*/7 * * * *" in row.text and "active" in row.text
        audit(browser, "schedules")
        row.find_element(By.ID, "run-deployment-health-probe").click()
        wait_for_text(browser, "done", "deployment-health-probe triggered")
        sign_in(browser, api_url, observer.client_id, observer.secret)
        _open(browser, f"{api_url}/console/schedules")
        assert not browser.find_elements(By.ID, "run-deployment-health-probe")
        assert "PlatformAdmin only" in text(browser, "schedules")

    async with serve(own) as api:
        await asyncio.to_thread(steps, api.url)

    async def triggered() -> bool:
        info = (await temporal_client.get_schedule_handle(probe).describe()).info
        return info.num_actions >= 1

    await eventually(triggered, timeout=20, interval=0.2)


def schedule_id_of(ids: list[str], name: str) -> str:
    return next(i for i in ids if i.endswith(f"/{name}"))


async def test_an_observer_sees_everything_and_can_approve_nothing(
    api_url: str,
    http: httpx.AsyncClient,
    demo: Demo,
    browser: WebDriver,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    target = f"obs-{uuid.uuid4().hex[:6]}/evaluated"
    await register(http, demo.auth, target, region="local", privacyClass="Local")
    observer = await _client(sessions, demo.tenant, [Role.OBSERVER])

    def steps() -> None:
        sign_in(browser, api_url, observer.client_id, observer.secret)
        _open(browser, f"{api_url}/console")
        assert browser.find_elements(By.CSS_SELECTOR, f"li.card[data-deployment='{target}']")
        _open(browser, f"{api_url}/console/deployment?id={target}")
        retire = browser.find_element(By.ID, "action-retire")  # a Candidate's; no approval
        assert retire.tag_name == "button" and not retire.is_enabled()
        assert "needs the role Operator or PlatformAdmin" in retire.text
        assert "You can look but not change" in text(browser, "read-only")
        audit(browser, "deployment-observer")
        # Even the confirmation page, reached by its URL, offers no form.
        _open(browser, f"{api_url}/console/deployment/confirm?id={target}&action=retire")
        assert not browser.find_elements(By.ID, "confirm")

    await asyncio.to_thread(steps)
    # And a hand-made POST with the observer's own valid CSRF token is refused as in the API.
    session, _ = await ConsoleSession.sign_in(api_url, observer.client_id, observer.secret)
    try:
        for action in ("approve", "retire", "evaluate", "license"):
            data = {"csrf_token": session.csrf, "id": target, "idempotency_key": "k1"}
            refused = await session.post(f"/console/deployment/{action}", data)
            assert refused.status_code == 403, (action, refused.text)
            assert "needs the role Operator or PlatformAdmin" in refused.text
    finally:
        await session.close()
    body = (await http.get(f"/factory/model-deployments/{target}", headers=demo.auth)).json()
    assert body["state"] == "Candidate" and body["evaluation"] is None


async def test_tenant_b_sees_none_of_tenant_a(
    api_url: str, demo: Demo, browser: WebDriver, sessions: async_sessionmaker[AsyncSession]
) -> None:
    token = demo.auth["Authorization"].removeprefix("Bearer ")
    async with AsyncOpenAI(base_url=f"{api_url}/v1", api_key=token, max_retries=0) as sdk:
        answer = await sdk.chat.completions.with_raw_response.create(
            model="code-agent", messages=[{"role": "user", "content": "tenant A only"}]
        )
    receipt_id = answer.headers["x-model-router-receipt-id"]
    other = await _client(sessions, f"tenant-b-{uuid.uuid4().hex[:6]}", [Role.PLATFORM_ADMIN])

    def steps() -> None:
        sign_in(browser, api_url, other.client_id, other.secret)
        _open(browser, f"{api_url}/console")
        assert not browser.find_elements(By.CSS_SELECTOR, "li.card")
        assert "0 deployments" in browser.find_element(By.ID, "main").text
        for path, name in (
            ("/console/deployment?id=local/sim-chat", "tenant-b-deployment"),
            (f"/console/receipts/{receipt_id}", "tenant-b-receipt"),
            ("/console/profiles/code-agent", "tenant-b-profile"),
        ):
            _open(browser, f"{api_url}{path}")
            assert "Not found" in browser.find_element(By.TAG_NAME, "h1").text, path
            audit(browser, name)
        _open(browser, f"{api_url}/console/receipts")
        assert not browser.find_elements(By.CSS_SELECTOR, "tr.receipt")
        assert "local/sim-chat" not in browser.page_source
        _open(browser, f"{api_url}/console/profiles")
        assert "code-agent" not in browser.page_source
        _open(browser, f"{api_url}/console/overview")
        assert "0 receipts" in text(browser, "overview-total")

    await asyncio.to_thread(steps)


async def test_a_post_without_its_csrf_token_is_refused(
    api_url: str, http: httpx.AsyncClient, demo: Demo
) -> None:
    target = f"csrf-{uuid.uuid4().hex[:6]}/candidate"
    await register(http, demo.auth, target, region="local", privacyClass="Local")
    session, signed = await ConsoleSession.sign_in(api_url, demo.admin.client_id, demo.admin.secret)
    try:
        assert signed.status_code == 303
        for data in ({"id": target}, {"id": target, "csrf_token": "0" * 64}):
            refused = await session.post("/console/deployment/retire", data)
            assert refused.status_code == 403 and "CSRF" in refused.text
        no_token = await session.post("/console/sign-out", {})
        assert no_token.status_code == 403
        # The session still works, and with its token the same POST goes through.
        done = await session.post(
            "/console/deployment/retire", {"id": target, "csrf_token": session.csrf}
        )
        assert done.status_code == 303, done.text
        # Evaluating it now is refused as the API refuses it, before any evaluation exists.
        evaluate = {"id": target, "csrf_token": session.csrf, "idempotency_key": "k-retired"}
        refused = await session.post("/console/deployment/evaluate", evaluate)
        assert refused.status_code == 409, refused.text
        assert "is Retired; it cannot be evaluated" in refused.text
        # One that does not exist is the console's 404, as the API's start refuses it.
        missing = {**evaluate, "id": f"{target}-nowhere", "idempotency_key": "k-missing"}
        refused = await session.post("/console/deployment/evaluate", missing)
        assert refused.status_code == 404, refused.text
        assert "No deployment" in refused.text
    finally:
        await session.close()
    body = (await http.get(f"/factory/model-deployments/{target}", headers=demo.auth)).json()
    assert body["state"] == "Retired" and body["evaluation"] is None


async def test_the_session_cookie_and_the_sign_in_guards(
    api_url: str, demo: Demo, settings: Settings
) -> None:
    # Over TLS (as a proxy in front reports it) the cookie is Secure too; it lasts as the token.
    session, answer = await ConsoleSession.sign_in(
        api_url, demo.admin.client_id, demo.admin.secret, **{"X-Forwarded-Proto": "https"}
    )
    await session.close()
    cookie = answer.headers["set-cookie"].lower()
    assert "mr_console=" in cookie and "httponly" in cookie and "samesite=strict" in cookie
    assert "secure" in cookie and f"max-age={settings.auth_token_ttl_seconds}" in cookie
    # A sign-in POST without the form's own nonce is refused (login CSRF).
    async with httpx.AsyncClient(base_url=api_url) as plain:
        forged = await plain.post(
            "/console/sign-in",
            data={"client_id": demo.admin.client_id, "client_secret": demo.admin.secret},
        )
        assert forged.status_code == 403 and "mr_console=" not in forged.headers.get(
            "set-cookie", ""
        )
        # An expired or foreign token in the cookie is no session.
        plain.cookies.set("mr_console", "not-a-token", path="/console")
        bounced = await plain.get("/console/receipts")
        assert bounced.status_code == 303 and "/console/sign-in" in bounced.headers["location"]
        # Only console paths are accepted as the place to go after signing in.
        page = await plain.get("/console/sign-in", params={"next": "https://evil.example/"})
        assert 'name="next" value="/console"' in page.text


async def test_a_requester_gets_what_the_api_gives_it(
    api_url: str, demo: Demo, sessions: async_sessionmaker[AsyncSession]
) -> None:
    """Roles as in the API: a Requester reads runs and the catalog, not deployments."""
    async with httpx.AsyncClient(base_url=api_url, timeout=30) as http:
        await register(http, demo.auth, "con/unlisted")  # in no profile, never called
    requester = await _client(sessions, demo.tenant, [Role.REQUESTER])
    session, signed = await ConsoleSession.sign_in(api_url, requester.client_id, requester.secret)
    try:
        assert signed.status_code == 303
        # The board is not its: the console's address sends it on to Profiles.
        board = await session.get("/console")
        assert board.status_code == 303
        assert board.headers["location"] == "/console/profiles"
        # Every run's receipts and the overview are the operators' (the API gives a Requester
        # one run's receipts by its id).
        refused = await session.get("/console/receipts")
        assert refused.status_code == 403
        assert "needs the role Observer or Operator or PlatformAdmin" in refused.text
        assert (await session.get("/console/overview")).status_code == 403
        receipts = await session.get("/console/receipts", run_id=str(uuid.uuid4()))
        assert receipts.status_code == 200
        # Its filter lists do not name the tenant's deployments, as the API does not list them.
        assert "con/unlisted" not in receipts.text and "con/unlisted" not in refused.text
        assert (await session.get("/console/profiles")).status_code == 200
        assert (await session.get("/console/schedules")).status_code == 403
    finally:
        await session.close()


async def test_usage_certainty_badges_are_distinct_and_a_fallback_is_marked(
    api_url: str, browser: WebDriver, sessions: async_sessionmaker[AsyncSession]
) -> None:
    # Receipts in each usage state, written as the invoke path and the reconciler leave them.
    tenant = f"badges-{uuid.uuid4().hex[:6]}"
    admin = await _client(sessions, tenant, [Role.PLATFORM_ADMIN])
    ids = {}
    for status in UsageStatus:
        ids[status.value] = await add_receipt(
            sessions,
            tenant=tenant,
            deployment_id="dep/badges",
            started_at=datetime.now(UTC),
            usage_status=status,
            input_tokens=None if status is UsageStatus.UNKNOWN else 12,
            output_tokens=None if status is UsageStatus.UNKNOWN else 5,
            estimated_cost_usd=None if status is UsageStatus.UNKNOWN else Decimal("0.0042"),
        )
    async with transaction(sessions) as session:
        row = await session.get(InvocationReceiptRow, ids["Estimated"])
        assert row is not None
        row.fallback_used = True

    def steps() -> None:
        sign_in(browser, api_url, admin.client_id, admin.secret)
        _open(browser, f"{api_url}/console/receipts")
        badges = {}
        for status, rid in ids.items():
            row = browser.find_element(By.CSS_SELECTOR, f"tr[data-receipt='{rid}']")
            badge = row.find_element(By.CSS_SELECTOR, ".badge.usage")
            badges[status] = (badge.text, badge.get_attribute("class"))
            assert bool(row.find_elements(By.CSS_SELECTOR, ".badge.fallback")) == (
                status == "Estimated"
            )
            assert ("0.0042" in row.text) == (status != "Unknown")
        assert {text for text, _ in badges.values()} == {
            "✓ Reported",
            "≈ Estimated",
            "? Unknown",
            "⇄ Reconciled",
        }
        assert len({cls for _, cls in badges.values()}) == 4
        audit(browser, "receipts-badges")

    await asyncio.to_thread(steps)


async def test_a_profile_page_says_why_each_fallback_is_equivalent(
    api_url: str, http: httpx.AsyncClient, demo: Demo, browser: WebDriver
) -> None:
    base = f"fb-{uuid.uuid4().hex[:6]}"
    strict = profile_event(
        f"{base}-local",
        ["local/sim-claude"],
        {"tool-calling": 0.9},
        privacyClass="Local",
        allowedRegions=["local"],
    )
    primary = profile_event(
        base,
        ["local/sim-chat"],
        {"tool-calling": 0.8},
        privacyClass="Confidential",
        allowedRegions=["local"],
        fallbackChain=[f"{base}-local"],
        fallbackEnabled=True,
    )
    for event in (strict, primary):
        assert (await publish(http, demo.auth, event)).status_code == 200, event

    def steps() -> None:
        sign_in(browser, api_url, demo.admin.client_id, demo.admin.secret)
        _open(browser, f"{api_url}/console/profiles/{base}")
        chain = text(browser, "chain")
        assert f"{base}-local: equivalent because" in chain
        assert "privacy Local is at least as strict as Confidential" in chain
        assert "same modality (Chat)" in chain
        assert "guarantees tool-calling >= 0.9 (needs 0.8)" in chain
        assert text(browser, "versions").count("Active") == 1
        audit(browser, "profile-fallback")

    await asyncio.to_thread(steps)
