"""Two console defects around the tenant's receipts at large.

A Requester (a runtime's service identity) browsed every run's receipts (run ids, idempotency
keys, request hashes) and the tenant's spend on the console, where the API gives it one run's
receipts by that run's id and nothing wider. Now the list without a run and the overview are
for the roles that watch the tenant's operations (domain.access), and a Requester opens its
run's receipts by its run id, refused otherwise with a page saying so.

And every view of the overview summed the whole window again (two window-function ranks over
every closed receipt of a 7-day window included): its figures are now read once per tenant,
window and short while (api/console/overview_cache.py), concurrent views sharing one read, and
the page says when they were read. The cache's clock is the test's, moved by hand: nothing
here waits on the wall clock."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api.console.overview_cache import TTL, OverviewCache, Snapshot
from core.local_ports import free_port
from core.settings import Settings
from domain.access import Action, may, reading_receipts
from domain.enums import Role, UsageStatus
from store import overview_reads
from store.overview_reads import OverviewFigures
from tests.helpers.browser import ConsoleSession, audit, sign_in, start_browser, text
from tests.helpers.clients import client_of
from tests.helpers.deadline import eventually, wait_until
from tests.helpers.receipts import add_receipt
from tests.helpers.stack import serve

NEEDS = "needs the role Observer or Operator or PlatformAdmin"


async def _signed_in(
    base: str, sessions: async_sessionmaker[AsyncSession], tenant: str, role: Role
) -> ConsoleSession:
    session, answer = await ConsoleSession.sign_in(base, *await client_of(sessions, tenant, role))
    assert answer.status_code == 303, answer.text[:300]
    return session


async def _receipt(
    sessions: async_sessionmaker[AsyncSession], tenant: str, run: uuid.UUID
) -> uuid.UUID:
    return await add_receipt(
        sessions,
        tenant=tenant,
        deployment_id="roles/dep",
        started_at=datetime.now(UTC) - timedelta(minutes=5),
        usage_status=UsageStatus.REPORTED,
        input_tokens=10,
        output_tokens=5,
        run_id=run,
    )


def _listed(html: str) -> set[str]:
    return set(re.findall(r'data-receipt="([0-9a-f-]{36})"', html))


# --- Defect A: a Requester reads one run's receipts, not the tenant's ------------------------


def test_the_tenants_receipts_at_large_are_for_the_roles_watching_its_operations() -> None:
    wider = reading_receipts(of_one_run=False)
    one_run = reading_receipts(of_one_run=True)
    assert wider is Action.READ_TENANT_RECEIPTS and one_run is Action.READ_RUNS
    assert not may({Role.REQUESTER}, wider) and may({Role.REQUESTER}, one_run)
    for role in (Role.PLATFORM_ADMIN, Role.OPERATOR, Role.OBSERVER):
        assert may({role}, wider) and may({role}, one_run)
    # The same roles the API lists the tenant's deployments to.
    for role in Role:
        assert may({role}, wider) == may({role}, Action.READ_DEPLOYMENTS)


async def test_a_requester_opens_its_runs_receipts_but_not_the_tenants(
    api_url: str, sessions: async_sessionmaker[AsyncSession], tenant: str
) -> None:
    mine, theirs = uuid.uuid4(), uuid.uuid4()
    my_receipt = await _receipt(sessions, tenant, mine)
    their_receipt = await _receipt(sessions, tenant, theirs)
    requester = await _signed_in(api_url, sessions, tenant, Role.REQUESTER)
    try:
        for params in ({}, {"outcome": "Completed"}, {"usage_status": "Reported"}):
            refused = await requester.get("/console/receipts", **params)
            assert refused.status_code == 403, (params, refused.text[:300])
            assert refused.headers["content-type"].startswith("text/html")
            html = refused.text
            assert NEEDS in html and "run id" in html
            assert 'aria-label="Console"' in html  # the navigation, as every page has it
            assert 'name="run_id"' in html  # the way to what it may read
            # Not one receipt, run or deployment of the tenant.
            assert not _listed(html)
            for hidden in (my_receipt, their_receipt, mine, theirs):
                assert str(hidden) not in html
            assert "roles/dep" not in html
        # Its run, named by id, as the API's /factory/runs/{runId}/model-receipts: 200.
        own = await requester.get("/console/receipts", run_id=str(mine))
        assert own.status_code == 200, own.text[:300]
        assert _listed(own.text) == {str(my_receipt)}
        # One receipt: of its run, named as its run's list links it; another run's, or any
        # without its run named, is no receipt (invocation ids follow idempotency keys, which
        # a neighbour may guess).
        opened = await requester.get(f"/console/receipts/{my_receipt}", run_id=str(mine))
        assert opened.status_code == 200, opened.text[:300]
        assert f"/console/receipts/{my_receipt}?run_id={mine}" in own.text
        unnamed = await requester.get(f"/console/receipts/{my_receipt}")
        assert unnamed.status_code == 404, unnamed.text[:300]
        guessed = await requester.get(f"/console/receipts/{their_receipt}", run_id=str(mine))
        assert guessed.status_code == 404, guessed.text[:300]
        # A run id that is no UUID is said beside its field, as to anyone: nothing listed.
        bad = await requester.get("/console/receipts", run_id="not-a-run")
        assert bad.status_code == 400 and not _listed(bad.text)
        # The overview sums every run's receipts: refused, in either window.
        for window in ("24h", "7d"):
            overview = await requester.get("/console/overview", window=window)
            assert overview.status_code == 403, overview.text[:300]
            assert overview.headers["content-type"].startswith("text/html")
            assert NEEDS in overview.text and 'aria-label="Console"' in overview.text
            assert 'id="overview-total"' not in overview.text
    finally:
        await requester.close()
    for role in (Role.OPERATOR, Role.OBSERVER):
        watcher = await _signed_in(api_url, sessions, tenant, role)
        try:
            listed = await watcher.get("/console/receipts")
            assert listed.status_code == 200, (role, listed.text[:300])
            assert _listed(listed.text) == {str(my_receipt), str(their_receipt)}
            one = await watcher.get("/console/receipts", run_id=str(theirs))
            assert one.status_code == 200 and _listed(one.text) == {str(their_receipt)}
            overview = await watcher.get("/console/overview")
            assert overview.status_code == 200, (role, overview.text[:300])
            assert "2 receipts in the last 24h" in overview.text
        finally:
            await watcher.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    driver = start_browser()
    try:
        yield driver
    finally:
        driver.quit()


async def test_a_requester_goes_from_the_refusal_to_its_run_in_the_browser(
    api_url: str,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    browser: WebDriver,
) -> None:
    run = uuid.uuid4()
    receipt = await _receipt(sessions, tenant, run)
    await _receipt(sessions, tenant, uuid.uuid4())  # another run's, never shown
    requester = await client_of(sessions, tenant, Role.REQUESTER)
    operator = await client_of(sessions, tenant, Role.OPERATOR)

    def steps() -> None:
        sign_in(browser, api_url, *requester)
        browser.get(f"{api_url}/console/receipts")
        wait_until(lambda: browser.find_elements(By.ID, "error"), timeout=20)
        assert "Not allowed" in browser.find_element(By.TAG_NAME, "h1").text
        assert NEEDS in text(browser, "error")
        assert not browser.find_elements(By.CSS_SELECTOR, "tr.receipt")
        audit(browser, "receipts-refused-requester")
        # The refusal's own form opens the run it names.
        browser.find_element(By.ID, "f-run").send_keys(str(run))
        browser.find_element(By.ID, "apply-filters").click()
        rows = wait_until(lambda: browser.find_elements(By.CSS_SELECTOR, "tr.receipt"), timeout=20)
        assert [r.get_attribute("data-receipt") for r in rows] == [str(receipt)]
        audit(browser, "receipts-one-run-requester")
        # An Operator's overview says when its figures were read.
        sign_in(browser, api_url, *operator)
        browser.get(f"{api_url}/console/overview")
        wait_until(lambda: browser.find_elements(By.ID, "overview-as-of"), timeout=20)
        assert re.fullmatch(
            r"Figures as of \d\d:\d\d:\d\d UTC, read again at most every 30 s\.",
            text(browser, "overview-as-of"),
        )
        audit(browser, "overview-as-of")

    await asyncio.to_thread(steps)


# --- Defect B: the overview's figures, read once per tenant, window and short while ----------


class _Clock:
    """The cache's now, moved only by the test."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now


@dataclass
class _Own:
    url: str
    cache: OverviewCache
    clock: _Clock
    receipt_reads: list[str]


@pytest.fixture
async def own_api(settings: Settings) -> AsyncIterator[_Own]:
    """An API of its own, to give its runtime a cache on the test's clock and count the
    statements its engine sends about receipts. Without Temporal: with the suite's client it
    would register a second in-process worker on the suite's invocation queue, and the console
    pages here never reach Temporal."""
    alone = settings.model_copy(
        update={
            "temporal_address": f"127.0.0.1:{free_port()}",
            "temporal_connect_timeout_seconds": 1.0,
        }
    )
    async with serve(alone) as api:
        runtime = api.app.state.runtime
        clock = _Clock()
        runtime.overview_cache = OverviewCache(clock=clock)
        reads: list[str] = []

        def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
            if "invocation_receipts" in statement:
                reads.append(statement)

        engine = runtime.engine.sync_engine
        sa.event.listen(engine, "before_cursor_execute", count)
        try:
            yield _Own(api.url, runtime.overview_cache, clock, reads)
        finally:
            sa.event.remove(engine, "before_cursor_execute", count)


def _total(html: str) -> str:
    found = re.search(r'<p id="overview-total">(\d+) receipts', html)
    assert found is not None, html[:2000]
    return found.group(1)


def _as_of(html: str) -> str:
    found = re.search(r'<p id="overview-as-of">Figures as of <time datetime="([^"]+)">', html)
    assert found is not None, html[:2000]
    return found.group(1)


async def test_the_overview_reads_the_store_once_per_tenant_window_and_while(
    own_api: _Own, sessions: async_sessionmaker[AsyncSession], tenant: str
) -> None:
    await _receipt(sessions, tenant, uuid.uuid4())
    console = await _signed_in(own_api.url, sessions, tenant, Role.OBSERVER)
    try:

        async def view(window: str = "24h") -> tuple[str, str, int]:
            before = len(own_api.receipt_reads)
            page = await console.get("/console/overview", window=window)
            assert page.status_code == 200, page.text[:300]
            return _total(page.text), _as_of(page.text), len(own_api.receipt_reads) - before

        total, as_of, reads = await view()
        assert total == "1" and reads > 0  # the first view reads the window
        assert as_of == own_api.clock.now.isoformat()  # and says when
        # A receipt written meanwhile, then the same view again: served as it was read.
        await _receipt(sessions, tenant, uuid.uuid4())
        assert await view() == ("1", as_of, 0)
        # Another window is another key: read on its own.
        total_7d, _, reads_7d = await view("7d")
        assert total_7d == "2" and reads_7d > 0
        # Just short of the window's time to live: still the figures read then.
        own_api.clock.now += TTL["24h"] - timedelta(microseconds=1)
        assert await view() == ("1", as_of, 0)
        # Past it: read again, and the page says when.
        own_api.clock.now += timedelta(microseconds=1)
        total, later, reads = await view()
        assert (total, reads > 0) == ("2", True) and later == own_api.clock.now.isoformat()
        # Dropped from the cache: read again at once.
        await _receipt(sessions, tenant, uuid.uuid4())
        own_api.cache.forget(tenant, "24h")
        total, _, reads = await view()
        assert total == "3" and reads > 0
        # A clock stepped back behind the read: the figures' age is unknown, read again.
        own_api.clock.now -= timedelta(minutes=5)
        total, stepped, reads = await view()
        assert reads > 0 and stepped == own_api.clock.now.isoformat()
    finally:
        await console.close()


async def test_concurrent_views_of_one_key_wait_on_one_read(
    sessions: async_sessionmaker[AsyncSession], tenant: str
) -> None:
    await _receipt(sessions, tenant, uuid.uuid4())
    cache = OverviewCache(clock=_Clock())
    gate = asyncio.Event()
    reads: list[datetime] = []

    async def read(now: datetime) -> Snapshot:
        reads.append(now)
        await gate.wait()  # held until both views wait
        async with sessions() as session:
            figures = await overview_reads.overview_figures(
                session, tenant, now - timedelta(hours=24), timedelta(minutes=30)
            )
        return Snapshot(now, figures, 0)

    views = [asyncio.create_task(cache.view(tenant, "24h", read)) for _ in range(3)]
    await eventually(lambda: cache.waiting(tenant, "24h") == 3)
    gate.set()
    first, *others = await asyncio.gather(*views)
    assert len(reads) == 1 and all(o is first for o in others)
    assert sum(c.count for c in first.figures.cells) == 1
    assert cache.waiting(tenant, "24h") == 0
    # A view that gives up waiting (its browser went away) does not end the read for the rest.
    cache.forget(tenant, "24h")
    gate.clear()
    leaving = asyncio.create_task(cache.view(tenant, "24h", read))
    staying = asyncio.create_task(cache.view(tenant, "24h", read))
    await eventually(lambda: cache.waiting(tenant, "24h") == 2)
    leaving.cancel()
    await eventually(lambda: cache.waiting(tenant, "24h") == 1)
    gate.set()
    kept = await staying
    assert len(reads) == 2 and leaving.cancelled()
    assert await cache.view(tenant, "24h", read) is kept and len(reads) == 2


async def test_a_failed_read_is_kept_by_no_one_and_the_cache_is_bounded() -> None:
    clock = _Clock()
    cache = OverviewCache(capacity=2, clock=clock)
    reads: list[str] = []
    empty = OverviewFigures([], {})

    def reader(tenant: str, fail: bool = False) -> Any:
        async def read(now: datetime) -> Snapshot:
            reads.append(tenant)
            if fail:
                raise ConnectionError("the store went away")
            return Snapshot(now, empty, 0)

        return read

    with pytest.raises(ConnectionError):
        await cache.view("t-a", "24h", reader("t-a", fail=True))
    await cache.view("t-a", "24h", reader("t-a"))  # read again, not the error kept
    assert reads == ["t-a", "t-a"]
    # Two keys fit; the least recently viewed goes when a third comes.
    await cache.view("t-b", "24h", reader("t-b"))
    await cache.view("t-a", "24h", reader("t-a"))  # kept: t-b is now the least recent
    await cache.view("t-c", "24h", reader("t-c"))
    assert len(cache) == 2 and reads == ["t-a", "t-a", "t-b", "t-c"]
    await cache.view("t-a", "24h", reader("t-a"))  # still kept
    await cache.view("t-b", "24h", reader("t-b"))  # dropped: read again
    assert reads == ["t-a", "t-a", "t-b", "t-c", "t-b"]
