"""What cannot be undone waits to be told twice, as `db downgrade` does: `deployments retire`
(Retired is the lifecycle's end) and `profiles retire --revoked` exit 2 without `--yes`,
having changed nothing; with it they go ahead."""

from __future__ import annotations

import json

import httpx
from temporalio.client import Client

from tests.helpers.catalog import profile_event, record_evidence
from tests.helpers.catalog import register as register_via_api
from tests.helpers.cli import cli_token, run


async def test_retiring_needs_yes_and_changes_nothing_without_it(
    cli_env: dict[str, str], tenant: str, temporal_client: Client, http: httpx.AsyncClient
) -> None:
    auth = {"Authorization": f"Bearer {await cli_token(http, cli_env)}"}
    await register_via_api(http, auth, "retire/kept")
    await record_evidence(temporal_client, tenant, "retire/kept", {"tool-calling": 0.95})
    approved = await http.post("/factory/model-deployments/retire/kept/approve", headers=auth)
    assert approved.status_code == 200, approved.text
    event = profile_event("retire-me", ["retire/kept"])
    assert (await http.post("/factory/asset-events", json=event, headers=auth)).status_code == 200

    async def state() -> str:
        shown = await run(cli_env, "deployments", "show", "retire/kept", "--json")
        assert shown.exit_code == 0, shown.output
        return str(json.loads(shown.stdout)["state"])

    refused = await run(cli_env, "deployments", "retire", "retire/kept")
    assert refused.exit_code == 2, refused.output
    assert "--yes" in refused.stderr and "for good" in " ".join(refused.stderr.split())
    assert await state() == "Approved"

    revoke = ("profiles", "retire", "retire-me", "1", "--release-id", event["releaseId"])
    refused = await run(cli_env, *revoke, "--revoked")
    assert refused.exit_code == 2, refused.output
    assert "--yes" in refused.stderr
    profiles = await run(cli_env, "profiles", "list", "--json")
    assert [p["profileId"] for p in json.loads(profiles.stdout)] == ["retire-me"]

    revoked = await run(cli_env, *revoke, "--revoked", "--yes")
    assert revoked.exit_code == 0, revoked.output
    profiles = await run(cli_env, "profiles", "list", "--json")
    assert json.loads(profiles.stdout) == []

    retired = await run(cli_env, "deployments", "retire", "retire/kept", "--yes")
    assert retired.exit_code == 0 and "retired retire/kept" in retired.stdout, retired.output
    assert await state() == "Retired"
