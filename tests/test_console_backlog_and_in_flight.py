"""Two readings of receipts the console gave wrong: an open receipt's page showed its claim's
placeholders (outcome Failed, usage Unknown) under its "In flight" badge, and the overview's
"await reconciliation" counted only the receipts of its window, so one older than the window
dropped out of the backlog while it still awaited its statement."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from core.settings import Settings
from domain.enums import InvocationOutcome, UsageStatus
from store import console_reads
from tests.helpers.browser import ConsoleSession
from tests.helpers.plans import plans
from tests.helpers.receipts import add_receipt


@pytest.fixture
async def console(api_url: str, cli_env: dict[str, str]) -> AsyncIterator[ConsoleSession]:
    session, answer = await ConsoleSession.sign_in(
        api_url, cli_env["MODEL_ROUTER_CLIENT_ID"], cli_env["MODEL_ROUTER_CLIENT_SECRET"]
    )
    assert answer.status_code == 303, answer.text
    yield session
    await session.close()


def _field(html: str, name: str) -> str:
    found = re.search(rf'<th scope="row">{name}</th><td>(.*?)</td>', html, re.S)
    assert found is not None, name
    return found.group(1)


def _html(resp: httpx.Response) -> str:
    assert resp.status_code == 200, resp.text[:300]
    return resp.text


async def test_an_open_receipts_page_shows_no_placeholder_outcome_usage_or_cost(
    console: ConsoleSession, sessions: async_sessionmaker[AsyncSession], tenant: str
) -> None:
    common = {
        "tenant": tenant,
        "deployment_id": "edge/page",
        "started_at": datetime.now(UTC),
        "usage_status": UsageStatus.UNKNOWN,
        "outcome": InvocationOutcome.FAILED,
        "estimated_cost_usd": Decimal("0.25"),
    }
    open_id = await add_receipt(sessions, **common, open_=True)  # type: ignore[arg-type]
    html = _html(await console.get(f"/console/receipts/{open_id}"))
    assert _field(html, "outcome") == "In flight"
    assert _field(html, "usageStatus") == "—"
    assert _field(html, "estimatedCostUsd") == "—"
    assert "Failed" not in html and "Unknown" not in html and "0.25" not in html
    # A closed one keeps what it says.
    closed_id = await add_receipt(sessions, **common)  # type: ignore[arg-type]
    closed = _html(await console.get(f"/console/receipts/{closed_id}"))
    assert _field(closed, "outcome") == "Failed" and _field(closed, "usageStatus") == "Unknown"
    assert _field(closed, "estimatedCostUsd") == "0.25"


async def test_the_backlog_awaiting_reconciliation_is_the_reconcilers_lookback(
    console: ConsoleSession, sessions: async_sessionmaker[AsyncSession], tenant: str
) -> None:
    # The suite's lookback is the default, 72 h: a receipt two days old still awaits its
    # statement, though it is older than the 24 h window.
    now = datetime.now(UTC)
    past, older, recent = (
        now - timedelta(days=30),
        now - timedelta(hours=48),
        now - timedelta(hours=1),
    )
    for started, status, tokens, open_ in (
        (older, UsageStatus.UNKNOWN, None, False),  # awaits: older than the 24 h window
        (older, UsageStatus.ESTIMATED, 12, False),  # awaits: an estimate to settle
        (recent, UsageStatus.UNKNOWN, None, False),  # awaits, in both windows
        (past, UsageStatus.UNKNOWN, None, False),  # past the lookback: final, no run settles it
        (older, UsageStatus.ESTIMATED, 0, False),  # reached no provider: awaits nothing
        (older, UsageStatus.REPORTED, 5, False),  # settled
        (recent, UsageStatus.UNKNOWN, None, True),  # in flight: nothing to settle yet
    ):
        await add_receipt(
            sessions, tenant=tenant, deployment_id="edge/backlog", started_at=started,
            usage_status=status, input_tokens=tokens, output_tokens=tokens, open_=open_,
        )  # fmt: skip
    for window, charted in (("24h", "1"), ("7d", "3")):
        html = _html(await console.get("/console/overview", window=window))
        total = re.search(r'<strong id="awaiting-total">([^<]*)</strong>', html)
        assert total is not None and total.group(1) == "3", html[:2000]
        in_window = re.search(r'<span id="awaiting-window">([^<]*)</span>', html)
        assert in_window is not None and in_window.group(1) == charted
        assert "lookback of 72 h" in html


async def test_the_backlog_is_counted_up_to_its_cap(
    sessions: async_sessionmaker[AsyncSession], tenant: str
) -> None:
    since = datetime.now(UTC) - timedelta(hours=72)
    for _ in range(3):
        await add_receipt(
            sessions, tenant=tenant, deployment_id="edge/cap",
            started_at=datetime.now(UTC) - timedelta(hours=2), usage_status=UsageStatus.UNKNOWN,
        )  # fmt: skip
    async with sessions() as session:
        assert await console_reads.awaiting_reconciliation(session, tenant, since) == 3
        assert await console_reads.awaiting_reconciliation(session, tenant, since, cap=1) == 2


async def test_the_backlog_is_read_through_an_index(settings: Settings) -> None:
    # Never a scan of every receipt of every tenant.
    since = datetime.now(UTC) - timedelta(hours=72)
    found = await plans(
        settings.database_url,
        lambda s: console_reads.awaiting_reconciliation(s, "tenant-plan", since),
    )
    assert len(found) == 1, found
    assert "Index" in found[0] and "Seq Scan" not in found[0], found[0]
    assert "on invocation_receipts" in found[0], found[0]
