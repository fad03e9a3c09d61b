"""A run's receipts in pages (`ListRunReceipts`): oldest first by start and then id, each page
pointing at the next in its `Link` header, and the CLI following every page. An agent run of
many thousands of calls was one answer, read, built and sent whole."""

from __future__ import annotations

import uuid

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api.routers.receipts import PAGE_MAX
from tests.conftest import TokenFactory
from tests.helpers.cli import run
from tests.helpers.receipts import run_of


@pytest.fixture
async def auth(token_for: TokenFactory, tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {await token_for(tenant)}"}


async def _walk(http: httpx.AsyncClient, auth: dict[str, str], url: str) -> list[list[str]]:
    pages: list[list[str]] = []
    next_url: str | None = url
    while next_url is not None:
        resp = await http.get(next_url, headers=auth)
        assert resp.status_code == 200, resp.text
        pages.append([r["invocationId"] for r in resp.json()])
        next_url = resp.links.get("next", {}).get("url")
    return pages


async def test_a_runs_receipts_come_in_pages_in_one_order(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
) -> None:
    run_id, ordered = await run_of(sessions, tenant, 5)
    url = f"/factory/runs/{run_id}/model-receipts"
    assert await _walk(http, auth, f"{url}?limit=2") == [ordered[:2], ordered[2:4], ordered[4:]]
    assert await _walk(http, auth, url) == [ordered]
    stranger = await http.get(f"{url}?after={uuid.uuid4()}", headers=auth)
    assert stranger.status_code == 422, stranger.text
    assert stranger.json()["errors"][0]["field"] == "query.after"
    too_many = await http.get(f"{url}?limit={PAGE_MAX + 1}", headers=auth)
    assert too_many.status_code == 422


async def test_a_long_run_is_paged_and_the_cli_lists_every_page(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    cli_env: dict[str, str],
) -> None:
    run_id, ordered = await run_of(sessions, tenant, PAGE_MAX + 3)
    pages = await _walk(http, auth, f"/factory/runs/{run_id}/model-receipts")
    assert [len(p) for p in pages] == [PAGE_MAX, 3]
    assert [i for p in pages for i in p] == ordered
    listed = await run(cli_env, "receipts", "list", "--run", str(run_id))
    assert listed.exit_code == 0, listed.output
    assert listed.stdout.count("pages/dep") == PAGE_MAX + 3
