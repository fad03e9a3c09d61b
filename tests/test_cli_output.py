"""What the CLI prints for a script: a piped or narrow table keeps every id and cost whole (rich
laid out 80 columns without a terminal and cut the rest with "…": an invocation id came out as
`f0a…`), and `--json` prints the API's JSON as one document."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client

from core.settings import Settings
from domain.enums import UsageStatus
from tests.helpers.catalog import profile_event, record_evidence
from tests.helpers.catalog import register as register_via_api
from tests.helpers.cli import cli_token, run
from tests.helpers.receipts import add_receipt


def piped(env: dict[str, str], columns: str | None) -> dict[str, str | None]:
    """The CLI's environment as a pipe sees it: no terminal, and COLUMNS as given (unset by
    default), nothing telling rich there is a terminal after all."""
    return {**env, "COLUMNS": columns, "FORCE_COLOR": None, "TTY_COMPATIBLE": None}


async def test_piped_and_narrow_receipt_tables_keep_every_id_and_cost_whole(
    cli_env: dict[str, str], sessions: async_sessionmaker[AsyncSession], tenant: str
) -> None:
    run_id = uuid.uuid4()
    deployment = "pipe/a-deployment-id-long-enough-to-be-cut-in-eighty-columns"
    start = datetime.now(UTC) - timedelta(minutes=5)
    ids = [
        await add_receipt(
            sessions,
            tenant=tenant,
            deployment_id=deployment,
            started_at=start + timedelta(seconds=i),
            usage_status=UsageStatus.REPORTED,
            input_tokens=123_456,
            output_tokens=7_890,
            estimated_cost_usd=Decimal("0.12345678"),
            run_id=run_id,
        )
        for i in range(2)
    ]

    for columns in (None, "40"):
        listed = await run(piped(cli_env, columns), "receipts", "list", "--run", str(run_id))
        assert listed.exit_code == 0, listed.output
        for invocation_id in ids:
            assert str(invocation_id) in listed.stdout, listed.stdout
        assert deployment in listed.stdout and "0.12345678" in listed.stdout, listed.stdout
        assert "…" not in listed.stdout

    as_json = await run(piped(cli_env, "40"), "receipts", "list", "--run", str(run_id), "--json")
    assert as_json.exit_code == 0, as_json.output
    document = json.loads(as_json.stdout)
    assert [r["invocationId"] for r in document] == [str(i) for i in ids]
    assert {r["deploymentId"] for r in document} == {deployment}

    none = await run(piped(cli_env, None), "receipts", "list", "--run", str(uuid.uuid4()), "--json")
    assert none.exit_code == 0 and json.loads(none.stdout) == []


async def test_list_show_and_preview_print_the_apis_json(
    cli_env: dict[str, str], tenant: str, temporal_client: Client, http: httpx.AsyncClient
) -> None:
    auth = {"Authorization": f"Bearer {await cli_token(http, cli_env)}"}
    deployment = "json/a-deployment-id-long-enough-to-be-cut-in-eighty-columns"
    await register_via_api(http, auth, deployment)
    await record_evidence(temporal_client, tenant, deployment, {"tool-calling": 0.95})
    approved = await http.post(f"/factory/model-deployments/{deployment}/approve", headers=auth)
    assert approved.status_code == 200, approved.text
    event = profile_event("cli-json", [deployment])
    assert (await http.post("/factory/asset-events", json=event, headers=auth)).status_code == 200
    env = piped(cli_env, "40")

    async def document(*args: str) -> Any:
        result = await run(env, *args, "--json")
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    assert [d["deploymentId"] for d in await document("deployments", "list")] == [deployment]
    shown = await document("deployments", "show", deployment)
    assert shown["deploymentId"] == deployment and shown["state"] == "Approved"
    assert [p["profileId"] for p in await document("profiles", "list")] == ["cli-json"]
    profile = await document("profiles", "show", "cli-json")
    assert [d["deploymentId"] for d in profile["deployments"]] == [deployment]
    plan = await document("route", "preview", "cli-json")
    assert [c["deploymentId"] for c in plan["candidates"]] == [deployment]

    # The tables, narrow and piped, name the deployment whole.
    for args in (("deployments", "list"), ("route", "preview", "cli-json")):
        table = await run(env, *args)
        assert table.exit_code == 0, table.output
        assert deployment in table.stdout and "…" not in table.stdout, table.stdout


async def test_schedules_list_as_json(settings: Settings) -> None:
    prefix = f"mr-json-{uuid.uuid4().hex[:8]}"  # schedules nobody created: each is missing
    env = {
        "MODEL_ROUTER_TEMPORAL_ADDRESS": settings.temporal_address,
        "MODEL_ROUTER_TEMPORAL_NAMESPACE": settings.temporal_namespace,
        "MODEL_ROUTER_SCHEDULE_ID_PREFIX": prefix,
    }
    listed = await run(piped(env, "40"), "schedules", "list", "--json")
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.stdout)
    assert rows and all(r["id"].startswith(prefix + "/") for r in rows)
    assert {r["state"] for r in rows} == {"missing"} and {r["nextRun"] for r in rows} == {None}
    table = await run(piped(env, "40"), "schedules", "list")
    assert table.exit_code == 0, table.output
    assert all(r["id"] in table.stdout for r in rows), table.stdout
