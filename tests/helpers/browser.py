"""A real headless Chromium (Debian's `chromium` and `chromium-driver`, installed by
scripts/test.sh) driven by Selenium, plus what every console page is held to: a screenshot saved
as a test artifact, axe-core run in the page with no violation allowed, and every form control
labelled.

Selenium is synchronous and the API under test runs on the test's event loop, so tests run
browser steps in a thread (`await asyncio.to_thread(steps)`)."""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver

from tests.helpers.deadline import wait_until

CHROMIUM = os.environ.get("MODEL_ROUTER_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("MODEL_ROUTER_TEST_CHROMEDRIVER", "/usr/bin/chromedriver")
WIDTH, HEIGHT = 1440, 1000
AXE = Path(__file__).parent.parent / "assets" / "axe-core" / "axe.min.js"


def screenshot_dir() -> Path:
    """Where the screenshots go: MODEL_ROUTER_TEST_SCREENSHOTS, or a directory under /tmp."""
    given = os.environ.get("MODEL_ROUTER_TEST_SCREENSHOTS")
    path = Path(given) if given else Path(tempfile.gettempdir()) / "model-router-console-shots"
    path.mkdir(parents=True, exist_ok=True)
    return path


def start_browser() -> WebDriver:
    for binary in (CHROMIUM, CHROMEDRIVER):
        if not Path(binary).exists():
            pytest.fail(
                f"{binary} is missing: scripts/test.sh installs Debian's chromium and "
                "chromium-driver when run as root; install them otherwise",
                pytrace=False,
            )
    options = Options()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",  # the test container runs as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={WIDTH},{HEIGHT}",
        "--lang=en-US",
    ):
        options.add_argument(arg)
    # An explicit driver path: Selenium Manager would otherwise try to download one.
    return webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)


_LABELS = """
const out = [];
for (const el of document.querySelectorAll('input, select, textarea')) {
  if (el.type === 'hidden') continue;
  const labelled = (el.labels && el.labels.length > 0) || el.getAttribute('aria-label')
    || el.getAttribute('aria-labelledby');
  if (!labelled) out.push(el.outerHTML.slice(0, 120));
}
return out;
"""

_AXE_RUN = """
const done = arguments[arguments.length - 1];
axe.run(document, {resultTypes: ['violations']})
  .then(r => done(JSON.stringify(r.violations.map(v => ({id: v.id, impact: v.impact,
      help: v.help, nodes: v.nodes.map(n => n.target.join(' ')).slice(0, 5)})))))
  .catch(e => done(JSON.stringify([{id: 'axe-error', help: String(e)}])));
"""


def audit(driver: WebDriver, name: str) -> Path:
    """Screenshot the page, then fail on any axe-core violation or unlabelled control."""
    path = screenshot_dir() / f"{re.sub(r'[^A-Za-z0-9_-]+', '-', name)}.png"
    # The whole page: the window grows to the document's height for the shot.
    height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    driver.set_window_size(WIDTH, min(max(height, HEIGHT), 6000))
    driver.save_screenshot(str(path))
    driver.set_window_size(WIDTH, HEIGHT)
    unlabelled = driver.execute_script(_LABELS)
    assert unlabelled == [], f"{name}: form controls without a label: {unlabelled}"
    driver.set_script_timeout(60)
    driver.execute_script(AXE.read_text())
    violations = json.loads(driver.execute_async_script(_AXE_RUN))
    assert violations == [], f"{name}: accessibility violations: {violations}"
    return path


def sign_in(driver: WebDriver, base: str, client_id: str, secret: str) -> None:
    driver.delete_all_cookies()
    driver.get(f"{base}/console/sign-in")
    driver.find_element(By.ID, "client_id").send_keys(client_id)
    driver.find_element(By.ID, "client_secret").send_keys(secret)
    driver.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    wait_until(lambda: driver.find_elements(By.ID, "tenant"), timeout=20)


def text(driver: WebDriver, element_id: str) -> str:
    return str(driver.find_element(By.ID, element_id).text)


def wait_for_text(driver: WebDriver, element_id: str, wanted: str, timeout: float = 30) -> str:
    def found() -> str | None:
        elements = driver.find_elements(By.ID, element_id)
        return elements[0].text if elements and wanted in elements[0].text else None

    return wait_until(found, timeout=timeout, interval=0.2)


class ConsoleSession:
    """A signed-in console session over plain HTTP (httpx), for what a browser would not send:
    forged or token-less POSTs, and pages read back for the canary."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http
        self.csrf = ""

    @classmethod
    async def sign_in(
        cls, base: str, client_id: str, secret: str, **headers: str
    ) -> tuple[ConsoleSession, httpx.Response]:
        http = httpx.AsyncClient(base_url=base, timeout=30)
        form = await http.get("/console/sign-in")
        nonce = _hidden(form.text, "login_nonce")
        answer = await http.post(
            "/console/sign-in",
            data={"client_id": client_id, "client_secret": secret, "login_nonce": nonce},
            headers=headers,
        )
        session = cls(http)
        # A Secure cookie (sign-in over TLS) is not sent back over this plain-HTTP client.
        if answer.status_code == 303 and "secure" not in answer.headers["set-cookie"].lower():
            # The console's first page for this client (a Requester's is not the board).
            first = await http.get("/console", follow_redirects=True)
            session.csrf = _hidden(first.text, "csrf_token")
        return session, answer

    async def get(self, path: str, **params: Any) -> httpx.Response:
        return await self.http.get(path, params=params or None)

    async def post(self, path: str, data: dict[str, Any]) -> httpx.Response:
        return await self.http.post(path, data=data)

    async def close(self) -> None:
        await self.http.aclose()


def _hidden(html: str, name: str) -> str:
    match = re.search(rf'name="{name}" value="([^"]*)"', html)
    assert match, f"no hidden field {name} in the page"
    return match.group(1)


def tab_to(driver: WebDriver, element_id: str, limit: int = 80) -> None:
    """Press Tab until the element has the focus: it is reachable by keyboard."""
    for _ in range(limit):
        if driver.switch_to.active_element.get_attribute("id") == element_id:
            return
        ActionChains(driver).send_keys(Keys.TAB).perform()
    raise AssertionError(f"#{element_id} is not reachable with Tab")
