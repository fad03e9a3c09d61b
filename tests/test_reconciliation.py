"""The receipt reconciler against local servers speaking OpenAI's and Anthropic's usage APIs:
Unknown and Estimated receipts become Reconciled with the right tokens and cost, once.
Receipts are inserted directly (the invoke path that writes them is not built yet)."""

from __future__ import annotations

import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import NamedTuple

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col, func, select
from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.testing import ActivityEnvironment, WorkflowEnvironment
from temporalio.worker import Worker

from activities.reconciliation import ReconciliationActivities
from activities.reconciliation_types import ReconciliationReport, WindowInput, WindowResult
from cli.schedules import left_undone
from core import metrics
from core.payload_converter import data_converter
from core.settings import Settings
from domain.enums import UsageStatus
from domain.pricing import PriceEntry, estimate_cost_usd
from domain.reconciliation import OPEN
from domain.statements import ReconcilerInput, StatementLine
from providers.secrets import default_broker
from providers.statements.imports import CSV, parse, statement_lines
from store import statements
from store.db import transaction
from store.ops_tables import ReceiptReconciliationRow, StatementImportRow
from store.reconciliation import awaiting_by_provider
from store.tables import InvocationReceiptRow, ModelDeploymentRow
from tests.conftest import TokenFactory
from tests.helpers.catalog import register
from tests.helpers.deadline import eventually
from tests.helpers.receipts import add_receipt, invoked_events, receipts
from tests.helpers.statement_servers import StatementServer, Usage
from worker import build_worker
from workflows.receipt_reconciler import ReceiptReconcilerWorkflow

ADMIN_KEY = "sk-admin-local-statements"
AS_OF = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
GPT = PriceEntry.model_validate(
    {
        "provider": "openai",
        "model": "gpt-4o",
        "inputUsdPerMtok": "2.5",
        "outputUsdPerMtok": "10",
        "cachedInputUsdPerMtok": "1.25",
        "effectiveFrom": "2026-01-01",
    }
)
SONNET = PriceEntry.model_validate(
    {
        "provider": "anthropic",
        "model": "claude-sonnet-4",
        "inputUsdPerMtok": "3",
        "outputUsdPerMtok": "15",
        "cachedInputUsdPerMtok": "0.3",
        "cacheWriteUsdPerMtok": "3.75",
        "effectiveFrom": "2026-01-01",
    }
)


@pytest.fixture
async def auth(token_for: TokenFactory, tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {await token_for(tenant)}"}


class Keys(NamedTuple):
    """A test's own provider keys: the provider's key ids and the endpointRefs they map to.
    A provider-wide bucket is shared out less the known usage of every tenant on its key, so
    tests sharing a key and an hour (AS_OF) would each count the others' receipts."""

    openai_ref: str
    openai_id: str
    anthropic_ref: str
    anthropic_id: str


@pytest.fixture
def keys() -> Keys:
    tag = uuid.uuid4().hex[:8].upper()
    return Keys(f"env:OPENAI_KEY_{tag}", f"key_{tag}", f"env:ANTHROPIC_KEY_{tag}", f"ak_{tag}")


def _sources(
    settings: Settings, server: StatementServer, mp: pytest.MonkeyPatch, keys: Keys
) -> Settings:
    for name in ("MR_TEST_OPENAI_ADMIN", "MR_TEST_ANTHROPIC_ADMIN"):
        mp.setenv(name, ADMIN_KEY)
        mp.setenv(f"{name}_BASE_URL", server.base_url)
    return settings.model_copy(
        update={
            "temporal_task_queue": f"reconcile-{uuid.uuid4().hex[:8]}",
            "statements_openai_admin_ref": "env:MR_TEST_OPENAI_ADMIN",
            "statements_openai_key_refs": {keys.openai_id: keys.openai_ref},
            "statements_anthropic_admin_ref": "env:MR_TEST_ANTHROPIC_ADMIN",
            "statements_anthropic_key_refs": {keys.anthropic_id: keys.anthropic_ref},
        }
    )


async def _reconcile(client: Client, settings: Settings, tenant: str) -> ReconciliationReport:
    """One reconciler pass over the tenant's last four hours before AS_OF, no settle delay."""
    return await client.execute_workflow(
        ReceiptReconcilerWorkflow.run,
        ReconcilerInput(lookback_hours=4, settle_delay_minutes=0, tenant_ids=[tenant], as_of=AS_OF),
        id=f"reconcile-test-{uuid.uuid4().hex[:8]}",
        task_queue=settings.temporal_task_queue,
    )


async def _counts(sessions: async_sessionmaker[AsyncSession], tenant: str) -> tuple[int, int]:
    async with sessions() as s:
        settled = await s.scalar(
            select(func.count())
            .select_from(ReceiptReconciliationRow)
            .where(col(ReceiptReconciliationRow.tenant_id) == tenant)
        )
    return int(settled or 0), len(await invoked_events(sessions, tenant))


async def test_provider_statements_settle_receipts_with_tokens_and_cost_once(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    temporal_client: Client,
    monkeypatch: pytest.MonkeyPatch,
    keys: Keys,
) -> None:
    await register(http, auth, "oa/gpt-4o", model="gpt-4o", endpointRef=keys.openai_ref)
    await register(
        http,
        auth,
        "an/sonnet",
        provider="anthropic",
        model="claude-sonnet-4",
        endpointRef=keys.anthropic_ref,
    )
    book = {
        "revision": "2026-11",
        "entries": [e.model_dump(mode="json", by_alias=True) for e in (GPT, SONNET)],
    }
    assert (await http.post("/factory/pricebook-revisions", json=book, headers=auth)).is_success

    # The run's clock is fixed (as_of): the lookback [00:00, 12:00) holds 12 hourly buckets
    # whatever the hour the test runs at, so each source answers in two pages of 8.
    hour = AS_OF - timedelta(hours=3)
    at = [hour + timedelta(minutes=m) for m in range(0, 60, 5)]
    gpt = "oa/gpt-4o"
    reported = await add_receipt(
        sessions,
        tenant=tenant,
        deployment_id=gpt,
        started_at=at[0],
        usage_status=UsageStatus.REPORTED,
        input_tokens=100,
        output_tokens=10,
    )
    timed_out = await add_receipt(
        sessions,
        tenant=tenant,
        deployment_id=gpt,
        started_at=at[1],
        usage_status=UsageStatus.UNKNOWN,
    )
    estimated = await add_receipt(
        sessions,
        tenant=tenant,
        deployment_id=gpt,
        started_at=at[2],
        usage_status=UsageStatus.ESTIMATED,
        input_tokens=300,
        output_tokens=50,
        estimated_cost_usd=Decimal("0.00125"),
    )
    no_usage = await add_receipt(
        sessions,
        tenant=tenant,
        deployment_id=gpt,
        started_at=at[3],
        usage_status=UsageStatus.UNKNOWN,
        provider_request_id="req_abc",
    )
    sonnet = [
        await add_receipt(
            sessions,
            tenant=tenant,
            deployment_id="an/sonnet",
            started_at=t,
            usage_status=UsageStatus.UNKNOWN,
        )
        for t in at[4:6]
    ]
    outside = await add_receipt(  # no statement covers its bucket yet: stays Unknown
        sessions,
        tenant=tenant,
        deployment_id=gpt,
        started_at=hour + timedelta(hours=2, minutes=59),
        usage_status=UsageStatus.UNKNOWN,
    )

    async with StatementServer(admin_key=ADMIN_KEY, page_size=8) as server:
        gpt_id, sonnet_id = keys.openai_id, keys.anthropic_id
        server.openai = [
            # 100 reported + 900 unexplained input, 150 unexplained output, 150 cached.
            Usage(at[0], "gpt-4o-2024-08-06", gpt_id, {"input_tokens": 1000, "output_tokens": 160,
                                                       "input_cached_tokens": 150}),
            Usage(at[1], "gpt-4o-2024-08-06", "key_other", {"input_tokens": 10**6}),
            Usage(at[1], "gpt-4o-2024-08-06", gpt_id, {"input_tokens": 10**6}, "batch"),
        ]  # fmt: skip
        server.anthropic = [
            Usage(at[4], "claude-sonnet-4-20250514", sonnet_id, {"uncached_input_tokens": 400,
                  "cache_read_input_tokens": 200, "cache_creation_5m": 100,
                  "cache_creation_1h": 100, "output_tokens": 120}),
            Usage(at[4], "claude-sonnet-4-20250514", sonnet_id, {"output_tokens": 10**6},
                  "batch"),
        ]  # fmt: skip
        reconcile_settings = _sources(settings, server, monkeypatch, keys)
        worker = build_worker(temporal_client, reconcile_settings, sessions)

        async def run() -> ReconciliationReport:
            return await _reconcile(temporal_client, reconcile_settings, tenant)

        async with worker:
            first = await run()
            after_first = await receipts(sessions, [reported, timed_out, estimated, no_usage])
            counts_first = await _counts(sessions, tenant)
            asked_first = list(server.requests)
            second = await run()

    assert first.failed_sources == {}
    assert (first.settled, second.settled) == (5, 0)
    paths = {path for path, _ in server.requests}
    assert paths == {
        "/v1/organization/usage/completions",
        "/v1/organization/usage/embeddings",
        "/v1/organizations/usage_report/messages",
    }
    openai_params = next(p for path, p in server.requests if "completions" in path)
    assert ("group_by", "model") in openai_params and ("group_by", "api_key_id") in openai_params
    assert ("bucket_width", "1h") in openai_params and ("batch", "false") in openai_params
    # 12 buckets in pages of 8: a run asks each source twice, the second time for its next page.
    asked = [path for path, _ in asked_first]
    assert sorted(asked.count(path) for path in paths) == [2, 2, 2]
    assert sum(1 for _, p in asked_first if any(name == "page" for name, _ in p)) == 3

    rows = await receipts(sessions, [reported, timed_out, estimated, no_usage, *sonnet, outside])
    assert rows[reported].usage_status is UsageStatus.REPORTED
    assert rows[outside].usage_status is UsageStatus.UNKNOWN and rows[outside].input_tokens is None
    for rid in (timed_out, estimated, no_usage):
        r = rows[rid]
        assert r.usage_status is UsageStatus.RECONCILED
        assert (r.input_tokens, r.output_tokens, r.cached_input_tokens) == (300, 50, 50)
        assert r.estimated_cost_usd == estimate_cost_usd(
            GPT, input_tokens=300, output_tokens=50, cached_input_tokens=50
        )
        assert r.statement_ref and r.statement_ref.startswith("openai-usage/")
    for rid in sonnet:
        r = rows[rid]
        assert (r.input_tokens, r.output_tokens, r.cached_input_tokens) == (400, 60, 100)
        # The bucket's 200 cache writes (5-minute and 1-hour) at the write price, not as input:
        # settled receipts were priced below the bill.
        assert r.cache_write_input_tokens == 100
        assert r.estimated_cost_usd == estimate_cost_usd(
            SONNET,
            input_tokens=400,
            output_tokens=60,
            cached_input_tokens=100,
            cache_write_input_tokens=100,
        )
        assert r.statement_ref and r.statement_ref.startswith("anthropic-usage/")
    async with sessions() as session:
        records = await session.scalars(
            select(ReceiptReconciliationRow).where(
                col(ReceiptReconciliationRow.invocation_id).in_(sonnet)
            )
        )
        assert [r.cache_write_input_tokens for r in records.all()] == [100, 100]

    events = await invoked_events(sessions, tenant)
    by_invocation = {e.payload["invocationId"]: e.payload for e in events}
    assert set(by_invocation) == {str(i) for i in (timed_out, estimated, no_usage, *sonnet)}
    payload = by_invocation[str(timed_out)]
    assert payload["usageStatus"] == "Reconciled" and payload["inputTokens"] == 300
    assert payload["projectId"] == "proj-ingest" and payload["deploymentId"] == gpt
    assert Decimal(payload["estimatedCostUsd"]) == rows[timed_out].estimated_cost_usd

    # The second run changed nothing: same rows, no new records or events.
    assert await receipts(sessions, list(after_first)) == after_first
    assert await _counts(sessions, tenant) == counts_first == (5, 5)
    assert second.awaiting == {
        p: int(metrics.usage_unknown.value({"provider": p})) for p in second.awaiting
    }


async def test_an_embedding_receipt_settles_from_the_embeddings_usage(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    temporal_client: Client,
    monkeypatch: pytest.MonkeyPatch,
    keys: Keys,
) -> None:
    """OpenAI reports embeddings apart from completions, and only completions were read: an
    embedding receipt (a bulk ingestion's 429s, a timeout) never matched a line and stayed
    Unknown, in usage_unknown, until its lookback passed."""
    model = "text-embedding-3-small"
    await register(http, auth, "oa/embed", model=model, endpointRef=keys.openai_ref)
    price = {"provider": "openai", "model": model, "inputUsdPerMtok": "0.02"}
    entry = {**price, "outputUsdPerMtok": "0", "effectiveFrom": "2026-01-01"}
    book = {"revision": "2026-11", "entries": [entry]}
    assert (await http.post("/factory/pricebook-revisions", json=book, headers=auth)).is_success
    at = AS_OF - timedelta(hours=3)
    unknown = await add_receipt(
        sessions,
        tenant=tenant,
        deployment_id="oa/embed",
        started_at=at,
        usage_status=UsageStatus.UNKNOWN,
    )
    async with StatementServer(admin_key=ADMIN_KEY, page_size=8) as server:
        server.openai_embeddings = [Usage(at, model, keys.openai_id, {"input_tokens": 420})]
        reconcile_settings = _sources(settings, server, monkeypatch, keys)
        async with build_worker(temporal_client, reconcile_settings, sessions):
            report = await _reconcile(temporal_client, reconcile_settings, tenant)
    assert report.failed_sources == {} and report.settled == 1
    row = (await receipts(sessions, [unknown]))[unknown]
    assert row.usage_status is UsageStatus.RECONCILED
    assert (row.input_tokens, row.output_tokens) == (420, 0)
    assert row.statement_ref and row.statement_ref.startswith("openai-usage/embeddings/")


async def test_a_failing_statement_source_is_retried_with_exponential_backoff(
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    monkeypatch: pytest.MonkeyPatch,
    keys: Keys,
) -> None:
    """Time-skipping: three failures cost 60 + 120 + 240 s of workflow time, not of ours; a
    refused credential is not retried and the run goes on without that source."""
    test_server = Path(sys.executable).parent / "temporal-test-server"
    async with (
        StatementServer(admin_key=ADMIN_KEY, fail_next=3, page_size=50) as server,
        httpx.AsyncClient(timeout=10) as statements_http,
    ):
        source_settings = _sources(settings, server, monkeypatch, keys).model_copy(
            update={"statements_anthropic_admin_ref": None}
        )
        acts = ReconciliationActivities(
            sessions, source_settings, default_broker(), statements_http
        )
        env = await WorkflowEnvironment.start_time_skipping(
            data_converter=data_converter,
            test_server_existing_path=str(test_server),
            # The SDK's default of 5 s ran out on a loaded 2-core host (CI, 2026-12-02): the
            # Java test server's start-up is the machine's speed, not this test's subject.
            test_server_startup_timeout=timedelta(seconds=60),
        )
        async with env:
            queue = "reconcile-time-skipping"
            async with Worker(
                env.client,
                task_queue=queue,
                workflows=[ReceiptReconcilerWorkflow],
                activities=[acts.sources, acts.fetch, acts.window, acts.gauge],
            ):
                job = ReconcilerInput(
                    lookback_hours=1,
                    tenant_ids=[tenant],
                    retry_initial_seconds=60,
                    retry_max_interval_seconds=600,
                    as_of=AS_OF,
                )
                real = time.monotonic()
                handle = await env.client.start_workflow(
                    ReceiptReconcilerWorkflow.run, job, id="reconcile-backoff", task_queue=queue
                )
                report = await handle.result()
                real_elapsed = time.monotonic() - real
                # The test server's clock: what the workflow lived through.
                run = await handle.describe()
                assert run.close_time is not None
                virtual_elapsed = run.close_time - run.start_time
                attempts = len(server.requests)

                monkeypatch.setenv("MR_TEST_OPENAI_ADMIN", "sk-admin-revoked")
                unread_before = metrics.reconcile_sources_failed.value({"source": "openai-usage"})
                refused = await env.client.execute_workflow(
                    ReceiptReconcilerWorkflow.run, job, id="reconcile-refused", task_queue=queue
                )

    assert report.failed_sources == {} and "openai-usage" in report.sources
    # Three refusals, then one successful page (11:00-12:00 back to midnight: 12 of 50 buckets)
    # of completions and one of embeddings.
    assert server.fail_next == 0 and attempts == 5
    assert timedelta(seconds=60 + 120 + 240) <= virtual_elapsed < timedelta(seconds=600)
    assert real_elapsed < 30
    assert len(server.requests) == attempts + 1  # a refused credential is asked once
    assert (
        "openai-usage" in refused.failed_sources
        and "auth" in refused.failed_sources["openai-usage"]
    )
    unread = metrics.reconcile_sources_failed.value({"source": "openai-usage"})
    assert unread == unread_before + 1


async def test_a_settlement_whose_cost_a_receipt_cannot_hold_is_settled_with_the_cost_unknown(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    temporal_client: Client,
    monkeypatch: pytest.MonkeyPatch,
    keys: Keys,
) -> None:
    # 1.5 million tokens at the largest price a revision holds cost 1.5e10 USD, past the
    # receipt's NUMERIC(18, 8): the settlement failed in the store on every pass, and so did
    # every other settlement of that pass. (A window that holds them: no receipt is settled past
    # its model's.)
    await register(
        http,
        auth,
        "oa/gpt-4o",
        model="gpt-4o",
        endpointRef=keys.openai_ref,
        contextWindowTokens=2_000_000,
    )
    top = GPT.model_copy(update={"input_usd_per_mtok": Decimal("9999999999.99999999")})
    book = {"revision": "2026-11", "entries": [top.model_dump(mode="json", by_alias=True)]}
    assert (await http.post("/factory/pricebook-revisions", json=book, headers=auth)).is_success
    hour = AS_OF - timedelta(hours=3)
    huge, small = [
        await add_receipt(
            sessions,
            tenant=tenant,
            deployment_id="oa/gpt-4o",
            started_at=hour + timedelta(minutes=minute),
            usage_status=UsageStatus.UNKNOWN,
        )
        for minute in (0, 60)
    ]
    async with StatementServer(admin_key=ADMIN_KEY, page_size=8) as server:
        server.openai = [
            Usage(hour, "gpt-4o-2024-08-06", keys.openai_id, {"input_tokens": 1_500_000}),
            Usage(
                hour + timedelta(hours=1), "gpt-4o-2024-08-06", keys.openai_id, {"input_tokens": 10}
            ),
        ]
        reconcile_settings = _sources(settings, server, monkeypatch, keys)
        async with build_worker(temporal_client, reconcile_settings, sessions):
            report = await _reconcile(temporal_client, reconcile_settings, tenant)
    assert report.failed_sources == {} and report.settled == 2
    rows = await receipts(sessions, [huge, small])
    assert rows[huge].usage_status is UsageStatus.RECONCILED
    assert rows[huge].input_tokens == 1_500_000 and rows[huge].estimated_cost_usd is None
    assert rows[small].estimated_cost_usd == estimate_cost_usd(
        top, input_tokens=10, output_tokens=0
    )


async def test_a_bucket_past_its_receipts_windows_is_left_unattributed(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    temporal_client: Client,
    monkeypatch: pytest.MonkeyPatch,
    keys: Keys,
) -> None:
    """Probes, evaluations and other users of the key write no receipts: a bucket of their
    tokens went whole to the one receipt awaiting."""
    await register(
        http, auth, "oa/gpt-4o", model="gpt-4o", endpointRef=keys.openai_ref,
        contextWindowTokens=128_000,
    )  # fmt: skip
    book = {"revision": "2026-11", "entries": [GPT.model_dump(mode="json", by_alias=True)]}
    assert (await http.post("/factory/pricebook-revisions", json=book, headers=auth)).is_success
    hour = AS_OF - timedelta(hours=3)
    lone = await add_receipt(
        sessions, tenant=tenant, deployment_id="oa/gpt-4o", started_at=hour,
        usage_status=UsageStatus.UNKNOWN,
    )  # fmt: skip
    before = metrics.reconcile_unattributed_tokens.value({"direction": "input"})
    async with StatementServer(admin_key=ADMIN_KEY, page_size=8) as server:
        server.openai = [
            Usage(hour, "gpt-4o-2024-08-06", keys.openai_id, {"input_tokens": 30_000_000})
        ]
        reconcile_settings = _sources(settings, server, monkeypatch, keys)
        async with build_worker(temporal_client, reconcile_settings, sessions):
            report = await _reconcile(temporal_client, reconcile_settings, tenant)
    assert report.settled == 1 and report.unattributed_input_tokens == 30_000_000 - 128_000
    assert (await receipts(sessions, [lone]))[lone].input_tokens == 128_000
    after = metrics.reconcile_unattributed_tokens.value({"direction": "input"})
    assert after - before == 30_000_000 - 128_000


async def test_a_tenants_stored_import_does_not_move_its_usage_onto_another_tenants_receipt(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    auth: dict[str, str],
    tenant: str,
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    temporal_client: Client,
    monkeypatch: pytest.MonkeyPatch,
    keys: Keys,
) -> None:
    """Two tenants on one OpenAI key, whose Usage API the reconciler reads. Tenant A's import
    of one token for the hour, stored before the import endpoint refused such rows (or by an
    API process not configured with the source), settled A's receipt at 1 token first; the
    provider's bucket took it as known and gave B's receipt 99,999 of its 100,000 tokens. Left
    out, the bucket is shared between them as without it."""
    other = f"tenant-{uuid.uuid4().hex[:8]}"
    other_auth = {"Authorization": f"Bearer {await token_for(other)}"}
    for who in (auth, other_auth):
        await register(http, who, "oa/gpt-4o", model="gpt-4o", endpointRef=keys.openai_ref)
    hour = AS_OF - timedelta(hours=3)
    mine, theirs = [
        await add_receipt(
            sessions,
            tenant=who,
            deployment_id="oa/gpt-4o",
            started_at=hour + timedelta(minutes=m),
            usage_status=UsageStatus.UNKNOWN,
        )
        for who, m in ((tenant, 5), (other, 10))
    ]
    text = (
        "provider,bucketStart,bucketWidth,model,inputTokens,outputTokens\n"
        f"openai,{hour:%Y-%m-%dT%H:%M:%SZ},1h,gpt-4o,1,0\n"
    )
    stored = StatementImportRow(tenant_id=tenant, content_hash="sha256:a", format=CSV, lines=1)
    async with transaction(sessions) as session:
        await statements.record_import(
            session, stored, statement_lines(stored.import_id, tenant, parse(text, CSV))
        )
    async with StatementServer(admin_key=ADMIN_KEY, page_size=8) as server:
        server.openai = [
            Usage(hour, "gpt-4o-2024-08-06", keys.openai_id,
                  {"input_tokens": 100_000, "output_tokens": 10_000}),
        ]  # fmt: skip
        reconcile_settings = _sources(settings, server, monkeypatch, keys)
        async with build_worker(temporal_client, reconcile_settings, sessions):
            report = await temporal_client.execute_workflow(
                ReceiptReconcilerWorkflow.run,
                ReconcilerInput(
                    lookback_hours=4,
                    settle_delay_minutes=0,
                    tenant_ids=[tenant, other],
                    as_of=AS_OF,
                ),
                id=f"reconcile-test-{uuid.uuid4().hex[:8]}",
                task_queue=reconcile_settings.temporal_task_queue,
            )
    assert report.failed_sources == {} and report.settled == 2
    rows = await receipts(sessions, [mine, theirs])
    for rid in (mine, theirs):
        row = rows[rid]
        assert (row.input_tokens, row.output_tokens) == (50_000, 5_000)
        assert (row.statement_ref or "").startswith("openai-usage/")


async def test_a_day_with_more_request_ids_than_one_statement_binds_still_finds_its_lines(
    sessions: async_sessionmaker[AsyncSession], tenant: str
) -> None:
    # asyncpg binds at most 32,767 parameters a statement: one IN list of a day's pending
    # request ids (an hour of 429s at 10 calls/s is 36,000) failed the window on every attempt.
    day = datetime(2026, 11, 21, tzinfo=UTC)
    ids = [f"{tenant}-req-{i:05d}" for i in range(40_000)]
    by_request = {"first": ids[0], "middle": ids[20_000], "last": ids[-1]}
    lines = [
        StatementLine(
            statement_ref=f"{tenant}/{name}",
            source="test",
            tenant_id=tenant,
            provider="openai",
            provider_request_id=request_id,
            input_tokens=3,
            output_tokens=4,
        )
        for name, request_id in by_request.items()
    ]
    lines.append(
        StatementLine(
            statement_ref=f"{tenant}/bucket",
            source="test",
            tenant_id=tenant,
            provider="openai",
            model="gpt-4o",
            bucket_start=day + timedelta(hours=3),
            bucket_end=day + timedelta(hours=4),
            input_tokens=30,
            output_tokens=40,
        )
    )
    async with transaction(sessions) as session:
        await statements.upsert_lines(session, lines)
    async with sessions() as session:
        found = await statements.lines_for(
            session,
            providers={"OpenAI"},
            tenants={tenant},
            start=day,
            end=day + timedelta(days=1),
            request_ids=reversed(ids),
        )
    assert [line.statement_ref for line in found] == sorted(line.statement_ref for line in lines)
    assert {line.provider_request_id for line in found} == {*by_request.values(), None}


async def test_a_day_that_keeps_failing_is_reported_and_the_days_after_it_are_still_reconciled(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    keys: Keys,
) -> None:
    """Time-skipping: the failing day's ten attempts back off in workflow time. Retried for
    ever, the run never reached the next day, and the schedule's runs all stopped at it."""
    await register(http, auth, "oa/gpt-4o", model="gpt-4o", endpointRef=keys.openai_ref)
    await add_receipt(
        sessions,
        tenant=tenant,
        deployment_id="oa/gpt-4o",
        started_at=AS_OF - timedelta(hours=2),
        usage_status=UsageStatus.UNKNOWN,
    )
    poison_day = (AS_OF - timedelta(days=1)).date()
    statements_http = httpx.AsyncClient(timeout=5)
    acts = ReconciliationActivities(sessions, settings, default_broker(), statements_http)
    tried: list[str] = []

    @activity.defn(name="reconcile_window")
    async def window(data: WindowInput) -> WindowResult:
        tried.append(data.start.date().isoformat())
        if data.start.date() == poison_day:
            raise RuntimeError("the store refused this day\nSQL: [parameters: ...]")
        return await acts.window(data)

    test_server = Path(sys.executable).parent / "temporal-test-server"
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=data_converter,
        test_server_existing_path=str(test_server),
        test_server_startup_timeout=timedelta(seconds=60),
    )
    failed_before = metrics.reconcile_windows_failed.value()
    async with env, statements_http:
        async with Worker(
            env.client,
            task_queue="reconcile-poison-day",
            workflows=[ReceiptReconcilerWorkflow],
            activities=[acts.sources, acts.fetch, window, acts.gauge],
        ):
            report = await env.client.execute_workflow(
                ReceiptReconcilerWorkflow.run,
                ReconcilerInput(
                    lookback_hours=30, settle_delay_minutes=0, tenant_ids=[tenant], as_of=AS_OF
                ),
                id="reconcile-poison-day",
                task_queue="reconcile-poison-day",
                # Without the bound the run retries the day until this ends it.
                execution_timeout=timedelta(hours=6),
            )
            # A run cancelled while the day backs off ends cancelled: not a failed day the
            # run goes on from.
            first_run = list(tried)
            attempts = tried.count(poison_day.isoformat())
            cancelled = await env.client.start_workflow(
                ReceiptReconcilerWorkflow.run,
                ReconcilerInput(
                    lookback_hours=30, settle_delay_minutes=0, tenant_ids=[tenant], as_of=AS_OF
                ),
                id="reconcile-poison-day-cancelled",
                task_queue="reconcile-poison-day",
            )
            await eventually(lambda: tried.count(poison_day.isoformat()) > attempts)
            await cancelled.cancel()
            with pytest.raises(WorkflowFailureError):
                await cancelled.result()
            assert (await cancelled.describe()).status == WorkflowExecutionStatus.CANCELED

    assert report.failed_windows == {
        poison_day.isoformat(): "RuntimeError: the store refused this day"
    }
    assert first_run.count(poison_day.isoformat()) == 10
    assert first_run[-1] == AS_OF.date().isoformat()
    # It can be alerted on (the run itself completed) ...
    assert metrics.reconcile_windows_failed.value() == failed_before + 1
    # ... and `schedules trigger --wait`, which reads the report untyped, exits 1 naming it.
    (as_read,) = data_converter.payload_converter.from_payloads(
        data_converter.payload_converter.to_payloads([report])
    )
    assert left_undone(as_read) == [
        f"day {poison_day.isoformat()} unreconciled (RuntimeError: the store refused this day)"
    ]
    # The day after was reconciled: its waiting receipt was looked at (and settled or not by
    # whatever statements other tests stored for that hour).
    assert report.pending == 1 and report.settled + report.unmatched == 1


async def test_an_open_receipt_is_left_to_its_close_and_settled_once_closed(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    keys: Keys,
) -> None:
    # A call still running past the settle delay (or its close waiting on the store): settled,
    # its close then wrote its own usage over the settlement, and the next pass settled it again.
    await register(http, auth, "oa/open", model="gpt-4o", endpointRef=keys.openai_ref)
    hour = AS_OF - timedelta(hours=2)
    running = await add_receipt(
        sessions,
        tenant=tenant,
        deployment_id="oa/open",
        started_at=hour + timedelta(minutes=5),
        usage_status=UsageStatus.UNKNOWN,
        provider_request_id=f"req_{uuid.uuid4().hex[:8]}",
        open_=True,
    )
    row = (await receipts(sessions, [running]))[running]
    line = StatementLine(
        statement_ref=f"import/open-{uuid.uuid4().hex[:6]}#L1",
        source="import/open",
        provider="openai",
        tenant_id=tenant,
        provider_request_id=row.provider_request_id,
        input_tokens=120,
        output_tokens=30,
    )
    async with transaction(sessions) as session:
        await statements.upsert_lines(session, [line])
    unused = httpx.AsyncClient()  # no statement source is configured: the window reads the store
    acts = ReconciliationActivities(sessions, settings, default_broker(), unused)
    window = WindowInput(start=hour, end=hour + timedelta(hours=1), tenant_ids=[tenant])
    held = await ActivityEnvironment().run(acts.window, window)
    assert (held.settled, held.skipped_reasons) == (0, {OPEN: 1})
    assert (await receipts(sessions, [running]))[running].usage_status is UsageStatus.UNKNOWN

    async with transaction(sessions) as session:
        closed = await session.get(InvocationReceiptRow, running)
        assert closed is not None
        closed.ended_at = hour + timedelta(minutes=6)
    settled = await ActivityEnvironment().run(acts.window, window)
    assert settled.settled == 1
    after = (await receipts(sessions, [running]))[running]
    assert (after.usage_status, after.input_tokens, after.output_tokens) == (
        UsageStatus.RECONCILED,
        120,
        30,
    )
    await unused.aclose()


async def test_the_gauge_counts_what_a_run_may_still_settle_only(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """A receipt started before the lookback is never settled by a run: counted, each stayed in
    usage_unknown for good, and an alert on the gauge meant nothing after the first month. Nor
    is one still open."""
    provider = f"gauge{uuid.uuid4().hex[:6]}"  # of this test alone
    await register(http, auth, "gauge/m", provider="vllm", model="m", endpointRef="pool:g")
    async with sessions() as s, s.begin():
        await s.execute(
            sa.update(ModelDeploymentRow)
            .where(col(ModelDeploymentRow.tenant_id) == tenant)
            .where(col(ModelDeploymentRow.deployment_id) == "gauge/m")
            .values(provider=provider)
        )
    now = datetime.now(UTC)
    for hours in (1, 71, 73, 24 * 30):
        await add_receipt(
            sessions,
            tenant=tenant,
            deployment_id="gauge/m",
            started_at=now - timedelta(hours=hours),
            usage_status=UsageStatus.UNKNOWN,
        )
    # A call still under way (claimed Unknown, not closed) awaits nothing yet: counted, the gauge
    # rose with the calls in flight and an alert on it fired under ordinary load.
    await add_receipt(
        sessions,
        tenant=tenant,
        deployment_id="gauge/m",
        started_at=now - timedelta(seconds=2),
        usage_status=UsageStatus.UNKNOWN,
        open_=True,
    )
    async with sessions() as session:
        counted = await awaiting_by_provider(session, 72)
    assert counted.get(provider) == 2
