"""Three console defects on the way to a run's receipts, in a real headless Chromium.

The receipts list read a run id in any form uuid.UUID parses (upper case, say), but linked each
receipt with the text as typed, and the receipt page compared that text with the stored run id:
a Requester (who may open only its run's receipts) saw the list, and every receipt it linked
was "Not found". The run filter refused a trailing space, and a value longer than its Query
bound (a `urn:uuid:` paste, a stray newline) was the bare 400 page, the form and the other
filters gone. And a sign-in landed everyone on the deployments board, which a Requester may not
read: its first page was "Not allowed"."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.select import Select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from domain.enums import InvocationOutcome, Role, Scope, UsageStatus
from tests.helpers.browser import audit, sign_in, start_browser, text
from tests.helpers.clients import client_of
from tests.helpers.deadline import wait_until
from tests.helpers.receipts import add_receipt


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    driver = start_browser()
    try:
        yield driver
    finally:
        driver.quit()


async def _receipt(
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    run: uuid.UUID,
    outcome: InvocationOutcome = InvocationOutcome.COMPLETED,
) -> uuid.UUID:
    return await add_receipt(
        sessions,
        tenant=tenant,
        deployment_id="runids/dep",
        started_at=datetime.now(UTC) - timedelta(minutes=5),
        usage_status=UsageStatus.REPORTED,
        outcome=outcome,
        input_tokens=10,
        output_tokens=5,
        run_id=run,
    )


def _h1(driver: WebDriver) -> str:
    return str(driver.find_element(By.TAG_NAME, "h1").text)


def _titled(driver: WebDriver, title: str) -> bool:
    """Whether the page now shown is titled so (False while the next one is still loading)."""
    return [h.text for h in driver.find_elements(By.TAG_NAME, "h1")] == [title]


def _gone(element: WebElement) -> bool:
    """Whether the page holding the element was left (the next one is on its way or in)."""
    try:
        element.is_enabled()
    except StaleElementReferenceException:
        return True
    return False


def _follow(element: WebElement) -> None:
    """Clicks the link or button, and waits until its page is left: the next page's title may
    be the same as this one's."""
    element.click()
    wait_until(lambda: _gone(element), timeout=20)


def _filter(driver: WebDriver, run_id: str) -> None:
    """Types the run id in its field, in place of what was there, and applies the filters."""
    field = driver.find_element(By.ID, "f-run")
    field.clear()
    field.send_keys(run_id)
    _follow(driver.find_element(By.ID, "apply-filters"))


def _rows_or_error(driver: WebDriver) -> list[str] | None:
    """The receipts listed once the filtered page is in, or None while it is not (the error
    beside the run field counts as in: no rows)."""
    if driver.find_elements(By.ID, "f-run-error"):
        return []
    rows = driver.find_elements(By.CSS_SELECTOR, "tr.receipt")
    return [str(r.get_attribute("data-receipt")) for r in rows] or None


async def test_a_requester_opens_a_receipt_of_its_run_typed_in_upper_case(
    api_url: str, sessions: async_sessionmaker[AsyncSession], tenant: str, browser: WebDriver
) -> None:
    run = uuid.uuid4()
    receipt = await _receipt(sessions, tenant, run)
    await _receipt(sessions, tenant, uuid.uuid4())  # another run's, never shown
    requester = await client_of(sessions, tenant, Role.REQUESTER)

    def steps() -> None:
        sign_in(browser, api_url, *requester)
        browser.get(f"{api_url}/console/receipts")
        wait_until(lambda: browser.find_elements(By.ID, "f-run"), timeout=20)
        _filter(browser, str(run).upper())
        listed = wait_until(lambda: _rows_or_error(browser), timeout=20)
        assert listed == [str(receipt)], _h1(browser)
        # The receipt its run's list links opens: it was "Not found", the link naming the run
        # as typed and the receipt page comparing that text with the stored id.
        row = browser.find_element(By.CSS_SELECTOR, f"tr[data-receipt='{receipt}']")
        _follow(row.find_element(By.CSS_SELECTOR, f"a[href^='/console/receipts/{receipt}']"))
        wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, "#fields, #error"), timeout=20)
        assert _h1(browser) == f"Receipt {receipt}"
        assert str(run) in text(browser, "fields")
        audit(browser, "receipt-of-upper-case-run-requester")
        # Back on the list, the run is named as its receipts store it, whatever the case typed.
        browser.back()
        wait_until(lambda: browser.find_elements(By.ID, "f-run"), timeout=20)
        assert _h1(browser) == f"Receipts of run {run}"
        assert browser.find_element(By.ID, "f-run").get_attribute("value") == str(run)
        # Named in any other form uuid.UUID reads, the receipt is its run's all the same.
        browser.get(f"{api_url}/console/receipts/{receipt}?run_id={run.hex.upper()}")
        assert _h1(browser) == f"Receipt {receipt}"

    await asyncio.to_thread(steps)


async def test_the_run_filter_reads_a_paste_and_says_what_it_cannot_beside_its_field(
    api_url: str, sessions: async_sessionmaker[AsyncSession], tenant: str, browser: WebDriver
) -> None:
    run = uuid.uuid4()
    completed = await _receipt(sessions, tenant, run)
    await _receipt(sessions, tenant, run, InvocationOutcome.FAILED)  # filtered out by outcome
    observer = await client_of(sessions, tenant, Role.OBSERVER)
    junk = "not-a-run-id-" * 20  # longer than any form of a UUID

    def outcome() -> str:
        chosen = Select(browser.find_element(By.ID, "f-outcome")).first_selected_option
        return str(chosen.get_attribute("value"))

    def steps() -> None:
        sign_in(browser, api_url, *observer)
        browser.get(f"{api_url}/console/receipts")
        wait_until(lambda: browser.find_elements(By.ID, "f-outcome"), timeout=20)
        Select(browser.find_element(By.ID, "f-outcome")).select_by_value("Completed")
        # Pasted with trailing spaces: the same run.
        _filter(browser, f"{run}   ")
        listed = wait_until(lambda: _rows_or_error(browser), timeout=20)
        assert listed == [str(completed)], _h1(browser)
        assert outcome() == "Completed"
        assert browser.find_element(By.ID, "f-run").get_attribute("value") == str(run)
        # As a URN, upper case: still the run, the outcome filter still in force.
        _filter(browser, f"urn:uuid:{str(run).upper()} ")
        assert wait_until(lambda: _rows_or_error(browser), timeout=20) == [str(completed)]
        assert _h1(browser) == f"Receipts of run {run}" and outcome() == "Completed"
        # Overlong junk: said beside the field, the form and the other filters kept.
        _filter(browser, junk)
        wait_until(lambda: browser.find_elements(By.ID, "f-run-error"), timeout=20)
        assert _h1(browser) == "Receipts"
        assert "not a UUID" in text(browser, "f-run-error")
        field = browser.find_element(By.ID, "f-run")
        assert field.get_attribute("aria-invalid") == "true"
        assert junk.startswith(str(field.get_attribute("value")))
        assert outcome() == "Completed"
        assert not browser.find_elements(By.CSS_SELECTOR, "tr.receipt")
        audit(browser, "receipts-overlong-run-id")

    await asyncio.to_thread(steps)


async def test_a_sign_in_lands_on_a_page_its_roles_may_read(
    api_url: str, sessions: async_sessionmaker[AsyncSession], tenant: str, browser: WebDriver
) -> None:
    run = uuid.uuid4()
    receipt = await _receipt(sessions, tenant, run)
    requester = await client_of(sessions, tenant, Role.REQUESTER)
    runs_only = await client_of(sessions, tenant, Role.REQUESTER, [Scope.RUNS_READ])
    operator = await client_of(sessions, tenant, Role.OPERATOR)

    def steps() -> None:
        # A Requester reads no deployments: its first page is Profiles, not "Not allowed".
        sign_in(browser, api_url, *requester)
        assert _h1(browser) == "Profiles"
        assert browser.current_url == f"{api_url}/console/profiles"
        audit(browser, "landing-requester")
        # Without the catalog's scope, the receipts page and its run id field.
        sign_in(browser, api_url, *runs_only)
        assert browser.current_url == f"{api_url}/console/receipts"
        assert browser.find_elements(By.ID, "f-run")
        # Who reads deployments lands on the board, as before.
        sign_in(browser, api_url, *operator)
        assert _h1(browser) == "Deployments"
        # A link followed without a session still signs in to the page it names.
        browser.delete_all_cookies()
        browser.get(f"{api_url}/console/receipts?run_id={run}")
        wait_until(lambda: browser.find_elements(By.ID, "client_id"), timeout=20)
        browser.find_element(By.ID, "client_id").send_keys(requester[0])
        browser.find_element(By.ID, "client_secret").send_keys(requester[1])
        browser.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
        wait_until(lambda: browser.find_elements(By.ID, "tenant"), timeout=20)
        assert browser.current_url == f"{api_url}/console/receipts?run_id={run}"
        assert _rows_or_error(browser) == [str(receipt)]

    await asyncio.to_thread(steps)


async def test_the_consoles_address_and_its_error_pages_lead_to_a_page_the_client_may_read(
    api_url: str, sessions: async_sessionmaker[AsyncSession], tenant: str, browser: WebDriver
) -> None:
    """`/console` is every client's way in (an SSO proxy opens it; every error page links back
    to it): a client that may read no deployments is sent on to its first page, not told "Not
    allowed" there."""
    requester = await client_of(sessions, tenant, Role.REQUESTER)
    operator = await client_of(sessions, tenant, Role.OPERATOR)

    def steps() -> None:
        sign_in(browser, api_url, *requester)
        browser.get(f"{api_url}/console")
        wait_until(lambda: _titled(browser, "Profiles"), timeout=20)
        assert browser.current_url == f"{api_url}/console/profiles"
        # An error page's way back leads there too.
        browser.get(f"{api_url}/console/receipts/{uuid.uuid4()}?run_id={uuid.uuid4()}")
        wait_until(lambda: browser.find_elements(By.ID, "error"), timeout=20)
        back = browser.find_element(By.LINK_TEXT, "Back to the console")
        _follow(back)
        wait_until(lambda: _titled(browser, "Profiles"), timeout=20)
        # Who reads deployments stays on the board.
        sign_in(browser, api_url, *operator)
        browser.get(f"{api_url}/console")
        wait_until(lambda: _titled(browser, "Deployments"), timeout=20)
        assert browser.current_url == f"{api_url}/console"

    await asyncio.to_thread(steps)
