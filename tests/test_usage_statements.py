"""Statement imports for self-hosted providers: all or nothing with the bad row's line and
field, replayed by content, tenant-scoped, and settled by the reconciler (by provider request
id, or shared out per bucket). Receipts are inserted directly: the invoke path is not built."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col, func, select
from temporalio.client import Client

from core.local_ports import free_port
from core.schedules import HEALTH_PROBE, RECONCILER, ensure_schedules, schedule_id
from core.settings import Settings
from domain.enums import Role, UsageStatus
from domain.health import HealthProbeInput
from domain.reconciliation import HELD
from domain.statements import ReconcilerInput
from store.ops_tables import StatementImportRow, UsageStatementLineRow
from tests.conftest import TokenFactory
from tests.helpers.catalog import register
from tests.helpers.cli import run
from tests.helpers.receipts import add_receipt, invoked_events, receipts
from tests.helpers.stack import serve
from workflows.receipt_reconciler import ReceiptReconcilerWorkflow

CSV = {"Content-Type": "text/csv"}
JSONL = {"Content-Type": "application/x-ndjson"}


@pytest.fixture
async def auth(token_for: TokenFactory, tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {await token_for(tenant)}"}


async def _stored(sessions: async_sessionmaker[AsyncSession], tenant: str) -> tuple[int, int]:
    async with sessions() as s:
        imports = await s.scalar(
            select(func.count())
            .select_from(StatementImportRow)
            .where(col(StatementImportRow.tenant_id) == tenant)
        )
        lines = await s.scalar(
            select(func.count())
            .select_from(UsageStatementLineRow)
            .where(col(UsageStatementLineRow.tenant_id) == tenant)
        )
    return int(imports or 0), int(lines or 0)


async def _settled(client: Client, settings: Settings, tenant: str, as_of: datetime) -> int:
    """A reconciler run over the tenant's last 4 hours before `as_of`, no settle delay: how
    many receipts it settled."""
    report = await client.execute_workflow(
        ReceiptReconcilerWorkflow.run,
        ReconcilerInput(lookback_hours=4, settle_delay_minutes=0, tenant_ids=[tenant], as_of=as_of),
        id=f"reconcile-import-{uuid.uuid4().hex[:8]}",
        task_queue=settings.temporal_task_queue,
    )
    return report.settled


async def test_a_malformed_row_rejects_the_whole_file_naming_its_line_and_field(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    body = (
        "provider,bucketStart,bucketWidth,model,key,inputTokens,outputTokens\n"
        "vllm,2026-11-30T10:00:00Z,1h,qwen2.5-coder,pool:tenant-a/vllm,1000,200\n"
        "vllm,2026-11-30T11:00:00Z,1h,qwen2.5-coder,pool:tenant-a/vllm,lots,200\n"
        "vllm,2026-11-30T12:00:00Z,1h,qwen2.5-coder,pool:tenant-a/vllm,10,2\n"
    )
    resp = await http.post("/factory/usage-statements", content=body, headers={**auth, **CSV})
    assert resp.status_code == 422, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    problem = resp.json()
    assert problem["errors"] == [
        {"line": 3, "field": "inputTokens", "message": problem["errors"][0]["message"]}
    ]
    assert "line 3, inputTokens" in problem["detail"]
    assert await _stored(sessions, tenant) == (0, 0)

    ok = await http.post(
        "/factory/usage-statements", content=body.replace("lots", "500"), headers={**auth, **CSV}
    )
    assert ok.status_code == 201, ok.text
    assert ok.json()["lines"] == 3 and await _stored(sessions, tenant) == (1, 3)
    replay = await http.post(
        "/factory/usage-statements", content=body.replace("lots", "500"), headers={**auth, **CSV}
    )
    assert replay.status_code == 200 and replay.json()["importId"] == ok.json()["importId"]
    assert await _stored(sessions, tenant) == (1, 3)
    listed = await http.get("/factory/usage-statements", headers=auth)
    assert [i["importId"] for i in listed.json()] == [ok.json()["importId"]]


@pytest.mark.parametrize(
    ("row", "field"),
    [
        # Counts past the receipts' INTEGER token columns, and buckets no timestamp column
        # holds: each reached the store, or overflowed on its way there, and was a 500.
        ("vllm,2026-11-30T10:00:00Z,1h,m,k,99999999999999999999999,1", "inputTokens"),
        ("vllm,2026-11-30T10:00:00Z,1h,m,k,1,2147483648", "outputTokens"),
        ("vllm,9999-12-31T23:00:00Z,1h,m,k,1,1", "bucketStart"),
        ("vllm,0001-01-01T00:00:00+14:00,1h,m,k,1,1", "bucketStart"),
        ("vllm,2026-11-30T10:00:00Z,1h,m\x00x,k,1,1", None),  # NUL: no text column holds it
    ],
)
async def test_a_value_no_column_holds_is_a_422_naming_it(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    sessions: async_sessionmaker[AsyncSession],
    row: str,
    field: str | None,
) -> None:
    body = f"provider,bucketStart,bucketWidth,model,key,inputTokens,outputTokens\n{row}\n"
    resp = await http.post("/factory/usage-statements", content=body, headers={**auth, **CSV})
    assert resp.status_code == 422, resp.text
    assert [(e["line"], e.get("field")) for e in resp.json()["errors"]] == [(2, field)]
    assert await _stored(sessions, tenant) == (0, 0)
    largest = "vllm,2026-11-30T10:00:00Z,1h,m,k,2147483647,2147483647"
    kept = await http.post(
        "/factory/usage-statements",
        content=body.replace(row, largest),
        headers={**auth, **CSV},
    )
    assert kept.status_code == 201, kept.text


async def test_a_cell_past_the_csv_modules_limit_is_a_422_naming_its_line(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """A cell past the csv module's field limit (128 KiB), well within the body's: the module
    raises csv.Error, not ValueError, and it was a 500."""
    body = (
        "provider,bucketStart,bucketWidth,model,key,inputTokens,outputTokens\n"
        "vllm,2026-11-30T10:00:00Z,1h,m,k,1,1\n"
        f"vllm,2026-11-30T10:00:00Z,1h,{'m' * 140_000},k,1,1\n"
    )
    resp = await http.post("/factory/usage-statements", content=body, headers={**auth, **CSV})
    assert resp.status_code == 422, resp.text
    assert [e["line"] for e in resp.json()["errors"]] == [3]
    assert await _stored(sessions, tenant) == (0, 0)


async def test_imports_refuse_other_media_types_and_non_admins(
    http: httpx.AsyncClient, auth: dict[str, str], token_for: TokenFactory, tenant: str
) -> None:
    wrong = await http.post(
        "/factory/usage-statements", content="{}", headers={**auth, "Content-Type": "text/plain"}
    )
    assert wrong.status_code == 415 and wrong.json()["field"] == "header.content-type"
    observer = {"Authorization": f"Bearer {await token_for(tenant, roles=[Role.OBSERVER])}"}
    line = '{"provider":"vllm","providerRequestId":"r","inputTokens":1,"outputTokens":1}\n'
    refused = await http.post(
        "/factory/usage-statements", content=line, headers={**observer, **JSONL}
    )
    assert refused.status_code == 403


async def test_a_row_for_usage_a_provider_wide_statement_reports_is_a_422_naming_provider(
    settings: Settings,
    auth: dict[str, str],
    tenant: str,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """OpenAI's Usage API read for every tenant on the key: a tenant's own figures for that
    usage moved its tokens onto other tenants' receipts (domain/reconciliation.py). Refused,
    the whole file, naming the row and `provider`; a key the usage API does not report, and
    a provider it does not cover, are the tenant's to import."""
    wide = settings.model_copy(
        update={
            "statements_openai_admin_ref": "env:MR_TEST_OPENAI_ADMIN",
            "statements_openai_key_refs": {"key_shared": "env:OPENAI_KEY_SHARED"},
            # An API of its own without Temporal: imports write the store only.
            "temporal_address": f"127.0.0.1:{free_port()}",
            "temporal_connect_timeout_seconds": 1.0,
        }
    )
    header = (
        "provider,providerRequestId,bucketStart,bucketWidth,model,key,inputTokens,outputTokens\n"
    )
    body = (
        header
        + "vllm,,2026-11-30T10:00:00Z,1h,qwen2.5-coder,pool:tenant-a/vllm,1000,200\n"
        + "openai,,2026-11-30T10:00:00Z,1h,gpt-4o,env:OPENAI_KEY_SHARED,1,0\n"
        + "openai,chatcmpl-1,,,,,1,0\n"
    )
    async with serve(wide) as api, httpx.AsyncClient(base_url=api.url) as c:
        resp = await c.post("/factory/usage-statements", content=body, headers={**auth, **CSV})
        assert resp.status_code == 422, resp.text
        assert resp.headers["content-type"].startswith("application/problem+json")
        problem = resp.json()
        assert [(e["line"], e["field"]) for e in problem["errors"]] == [
            (3, "provider"),
            (4, "provider"),
        ]
        assert (
            "line 3, provider" in problem["detail"] and "nothing was imported" in problem["detail"]
        )
        assert await _stored(sessions, tenant) == (0, 0)
        own_key = body.replace("env:OPENAI_KEY_SHARED", "env:OPENAI_KEY_MINE").replace(
            "openai,chatcmpl-1,,,,,1,0\n", ""
        )
        ok = await c.post("/factory/usage-statements", content=own_key, headers={**auth, **CSV})
        assert ok.status_code == 201, ok.text
        assert await _stored(sessions, tenant) == (1, 2)


async def test_imported_statements_settle_self_hosted_receipts(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    temporal_client: Client,
) -> None:
    pool = "pool:tenant-a/vllm"
    await register(
        http, auth, "vllm/qwen", provider="vllm", model="qwen2.5-coder", endpointRef=pool
    )
    # A fixed clock for the run (as_of): the windows do not depend on the hour the test runs.
    as_of = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
    hour = as_of - timedelta(hours=2)
    cut = await add_receipt(
        sessions,
        tenant=tenant,
        deployment_id="vllm/qwen",
        started_at=hour + timedelta(minutes=1),
        usage_status=UsageStatus.UNKNOWN,
        provider_request_id="cmpl-7f3a",
    )
    shared = [
        await add_receipt(
            sessions,
            tenant=tenant,
            deployment_id="vllm/qwen",
            started_at=hour + timedelta(minutes=m),
            usage_status=UsageStatus.UNKNOWN,
        )
        for m in (10, 20)
    ]
    start = hour.strftime("%Y-%m-%dT%H:%M:%SZ")
    statement = (
        '{"provider":"vllm","providerRequestId":"cmpl-7f3a","inputTokens":812,'
        '"outputTokens":97,"cachedInputTokens":512}\n'
        f'{{"provider":"vllm","bucketStart":"{start}","bucketWidth":"1h",'
        f'"model":"qwen2.5-coder","key":"{pool}","inputTokens":2812,"outputTokens":297}}\n'
    )
    resp = await http.post(
        "/factory/usage-statements", content=statement, headers={**auth, **JSONL}
    )
    assert resp.status_code == 201, resp.text
    import_id = resp.json()["importId"]

    async def reconcile() -> int:
        return await _settled(temporal_client, settings, tenant, as_of)

    assert await reconcile() == 3
    rows = await receipts(sessions, [cut, *shared])
    assert (rows[cut].input_tokens, rows[cut].output_tokens) == (812, 97)
    assert rows[cut].cached_input_tokens == 512
    assert rows[cut].statement_ref == f"import/{import_id}#L1"
    # The bucket's 2812/297 less the request matched by id, shared equally by the two others.
    for rid in shared:
        assert rows[rid].usage_status is UsageStatus.RECONCILED
        assert (rows[rid].input_tokens, rows[rid].output_tokens) == (1000, 100)
        assert rows[rid].statement_ref == f"import/{import_id}#L2"
    assert rows[cut].estimated_cost_usd is None  # no price for the pool: tokens, not a guess
    assert len(await invoked_events(sessions, tenant)) == 3
    assert await reconcile() == 0
    assert len(await invoked_events(sessions, tenant)) == 3


async def test_a_request_id_a_server_used_again_the_next_day_settles_one_receipt_once(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    temporal_client: Client,
) -> None:
    """A self-hosted server numbers its requests from 1 again after a restart: the next day's
    receipt carries the id of one settled the day before. The line that settled that one gave
    the new one its whole count as well, a second time; now it names neither of them again."""
    pool = "pool:tenant-a/vllm"
    await register(
        http, auth, "vllm/again", provider="vllm", model="qwen2.5-coder", endpointRef=pool
    )
    first_day = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
    first = await add_receipt(
        sessions,
        tenant=tenant,
        deployment_id="vllm/again",
        started_at=first_day - timedelta(hours=2),
        usage_status=UsageStatus.UNKNOWN,
        provider_request_id="cmpl-1",
    )
    statement = (
        '{"provider":"vllm","providerRequestId":"cmpl-1","inputTokens":800,"outputTokens":90}\n'
    )
    resp = await http.post(
        "/factory/usage-statements", content=statement, headers={**auth, **JSONL}
    )
    assert resp.status_code == 201, resp.text

    async def reconcile(as_of: datetime) -> int:
        return await _settled(temporal_client, settings, tenant, as_of)

    assert await reconcile(first_day) == 1
    next_day = first_day + timedelta(days=1)
    second = await add_receipt(
        sessions,
        tenant=tenant,
        deployment_id="vllm/again",
        started_at=next_day - timedelta(hours=2),
        usage_status=UsageStatus.UNKNOWN,
        provider_request_id="cmpl-1",
    )
    assert await reconcile(next_day) == 0
    rows = await receipts(sessions, [first, second])
    assert (rows[first].input_tokens, rows[first].output_tokens) == (800, 90)
    assert rows[second].usage_status is UsageStatus.UNKNOWN
    assert len(await invoked_events(sessions, tenant)) == 1


async def test_triggering_the_reconciler_settles_exact_matches_at_once_and_says_what_waits(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    temporal_client: Client,
) -> None:
    """Under the default settle delay (15 min), an import followed by `schedules trigger
    receipt-reconciler --wait` settles the receipt its request id names at once; the bucket
    that ended a minute ago waits, and the run's report says so."""
    pool = "pool:tenant-a/vllm"
    await register(http, auth, "vllm/now", provider="vllm", model="qwen2.5-coder", endpointRef=pool)
    as_of = datetime(2026, 11, 20, 12, 1, tzinfo=UTC)  # the run's clock (fixed: no hour in it)
    exact = await add_receipt(
        sessions,
        tenant=tenant,
        deployment_id="vllm/now",
        started_at=as_of - timedelta(minutes=3),
        usage_status=UsageStatus.UNKNOWN,
        provider_request_id="cmpl-recent",
    )
    bucketed = await add_receipt(
        sessions,
        tenant=tenant,
        deployment_id="vllm/now",
        started_at=as_of - timedelta(minutes=20),
        usage_status=UsageStatus.UNKNOWN,
    )
    bucket = (as_of - timedelta(hours=1, minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    statement = (
        '{"provider":"vllm","providerRequestId":"cmpl-recent","inputTokens":40,"outputTokens":4}\n'
        f'{{"provider":"vllm","bucketStart":"{bucket}","bucketWidth":"1h",'
        f'"model":"qwen2.5-coder","key":"{pool}","inputTokens":900,"outputTokens":90}}\n'
    )
    imported = await http.post(
        "/factory/usage-statements", content=statement, headers={**auth, **JSONL}
    )
    assert imported.status_code == 201, imported.text

    scheduled = settings.model_copy(
        update={"schedule_id_prefix": f"mr-test-{uuid.uuid4().hex[:8]}"}
    )
    assert scheduled.reconciler_settle_delay_minutes == 15
    await ensure_schedules(
        temporal_client,
        scheduled,
        probe=HealthProbeInput(tenant_ids=[tenant]),
        reconciler=ReconcilerInput(
            tenant_ids=[tenant],
            settle_delay_minutes=scheduled.reconciler_settle_delay_minutes,
            as_of=as_of,
        ),
    )
    env = {
        "MODEL_ROUTER_TEMPORAL_ADDRESS": scheduled.temporal_address,
        "MODEL_ROUTER_SCHEDULE_ID_PREFIX": scheduled.schedule_id_prefix,
        "COLUMNS": "250",
    }
    try:
        done = await run(env, "schedules", "trigger", RECONCILER, "--wait")
    finally:
        for name in (HEALTH_PROBE, RECONCILER):
            await temporal_client.get_schedule_handle(schedule_id(scheduled, name)).delete()
    assert done.exit_code == 0, done.output
    rows = await receipts(sessions, [exact, bucketed])
    assert rows[exact].usage_status is UsageStatus.RECONCILED
    assert (rows[exact].input_tokens, rows[exact].output_tokens) == (40, 4)
    assert rows[bucketed].usage_status is UsageStatus.UNKNOWN  # its bucket ended 1 min ago
    lines = [" ".join(line.split()) for line in done.output.splitlines()]
    assert "settled 1" in lines and "by_request_id 1" in lines
    assert f"skipped_reasons 1 {HELD}" in lines, done.output

    # Past the delay the bucket is shared out.
    later = await temporal_client.execute_workflow(
        ReceiptReconcilerWorkflow.run,
        ReconcilerInput(tenant_ids=[tenant], as_of=as_of + timedelta(minutes=15)),
        id=f"reconcile-later-{uuid.uuid4().hex[:8]}",
        task_queue=settings.temporal_task_queue,
    )
    assert (later.settled, later.skipped_reasons) == (1, {})
    # The bucket's 900/90 less what the exactly matched receipt in it explains (40/4).
    shared = (await receipts(sessions, [bucketed]))[bucketed]
    assert (shared.input_tokens, shared.output_tokens) == (860, 86)
