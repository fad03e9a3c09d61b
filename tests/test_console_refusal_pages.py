"""A refused lifecycle action's page, in a real headless Chromium: it is the answer to the
action's POST, so the address bar kept the action's POST-only address. A reload (F5) sent the
action again, and once the evaluation the page follows ended, the page's script asked that
address for the page again: a 405 error page instead of the scores. The page now puts its own
address in the address bar, and the script goes to the page's own address."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from urllib.parse import quote

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from domain.suite import Suite
from providers.upstream import Fault, FaultKind, UpstreamServer
from providers.upstream.suite_responders import competent_responder
from tests.helpers.browser import sign_in, start_browser, wait_for_text
from tests.helpers.catalog import register
from tests.helpers.deadline import wait_until

SLOW_MODEL = "slow-sim"


@pytest.fixture(scope="module")
async def upstream() -> AsyncIterator[UpstreamServer]:
    async with UpstreamServer() as server:
        server.register("*", competent_responder(Suite()))
        yield server


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    driver = start_browser()
    try:
        yield driver
    finally:
        driver.quit()


async def _auth(http: httpx.AsyncClient, cli_env: dict[str, str]) -> dict[str, str]:
    token = (
        await http.post(
            "/oauth/token",
            data={"grant_type": "client_credentials"},
            auth=(cli_env["MODEL_ROUTER_CLIENT_ID"], cli_env["MODEL_ROUTER_CLIENT_SECRET"]),
        )
    ).json()["access_token"]
    return {"Authorization": f"Bearer {token}"}


async def test_a_refused_evaluate_follows_the_running_one_to_the_deployments_page(
    api_url: str,
    http: httpx.AsyncClient,
    cli_env: dict[str, str],
    upstream: UpstreamServer,
    browser: WebDriver,
) -> None:
    """Evaluate, Back, Evaluate: the second is refused ("being evaluated already") and its page
    follows the evaluation under way; when that ends the operator sees the scores."""
    auth = await _auth(http, cli_env)
    target = f"refused-{uuid.uuid4().hex[:6]}/slow"
    await register(
        http,
        auth,
        target,
        model=SLOW_MODEL,
        endpointRef=upstream.endpoint_ref,
        region="local",
        privacyClass="Local",
    )
    # Each case's answer held a second (below the first-token bound), until the test lets the
    # run go: the run is under way for as long as the test needs it to be.
    upstream.inject(SLOW_MODEL, Fault(kind=FaultKind.SLOW_FIRST_TOKEN, delay=1.0))
    page = f"{api_url}/console/deployment?id={quote(target, safe='/')}"

    def open_confirmation() -> None:
        sign_in(
            browser,
            api_url,
            cli_env["MODEL_ROUTER_CLIENT_ID"],
            cli_env["MODEL_ROUTER_CLIENT_SECRET"],
        )
        browser.get(page)
        wait_until(lambda: browser.find_elements(By.ID, "action-evaluate"), timeout=20)
        browser.find_element(By.ID, "action-evaluate").click()
        wait_until(lambda: browser.find_elements(By.ID, "confirm"), timeout=20)

    await asyncio.to_thread(open_confirmation)
    # Another evaluation starts meanwhile (the API here; the first Evaluate of the scenario).
    started = await http.post(
        f"/factory/model-deployments/{target}/evaluate",
        headers={**auth, "Idempotency-Key": uuid.uuid4().hex},
    )
    assert started.status_code == 202, started.text
    assert started.json()["status"] == "Running"

    def refused_then_reloaded() -> None:
        browser.find_element(By.ID, "confirm").click()
        refusal = wait_for_text(browser, "refusal", "being evaluated already")
        assert "Refused (409)" in refusal
        # The page's own address, not the action's: the one a reload and the script ask for.
        wait_until(lambda: browser.current_url == page, timeout=10)
        assert browser.find_element(By.ID, "evaluation").get_attribute("data-running") == "true"
        # A reload shows the page again: it sent the action again (refused again, at best).
        browser.refresh()
        wait_until(lambda: browser.find_elements(By.ID, "state"), timeout=20)
        assert browser.current_url == page
        assert not browser.find_elements(By.ID, "refusal")

    await asyncio.to_thread(refused_then_reloaded)
    # Let the run end: no more held answers, and those held now go.
    upstream.state.clear_faults(SLOW_MODEL)
    upstream.release()

    def lands_on_the_scores() -> None:
        def evaluated() -> bool:
            # One read of the page: the script may replace it between two reads.
            state, error = browser.execute_script(
                "const s = document.getElementById('state');"
                "const e = document.getElementById('error');"
                "return [s ? s.textContent : null, e ? e.textContent : null];"
            )
            assert error is None, f"{browser.current_url}: {error}"
            return bool(state == "Evaluated")

        wait_until(evaluated, timeout=120, interval=0.3)
        assert browser.current_url == page
        assert browser.find_element(By.ID, "evaluation-status").text == "Completed"
        assert browser.find_elements(By.CSS_SELECTOR, "#scores tbody tr")

    await asyncio.to_thread(lands_on_the_scores)
    # One evaluation ran, the API's: the console's was refused and the reload sent nothing.
    body = (await http.get(f"/factory/model-deployments/{target}", headers=auth)).json()
    assert body["evaluation"]["evaluationId"] == started.json()["evaluationId"]
