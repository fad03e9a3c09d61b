"""The operator CLI against the running API: readable tables, non-zero exit with the reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from temporalio.client import Client

from tests.helpers.catalog import deployment_body, profile_event, record_evidence
from tests.helpers.catalog import register as register_via_api
from tests.helpers.cli import run


async def test_operator_flow_through_the_cli(
    cli_env: dict[str, str], tmp_path: Path, tenant: str, temporal_client: Client
) -> None:
    reg = tmp_path / "deployment.yaml"
    reg.write_text(yaml.safe_dump(deployment_body("cli/coder", licenseMetadata=None)))
    first = await run(cli_env, "deployments", "register", str(reg))
    assert first.exit_code == 0, first.output
    assert "registered cli/coder (Candidate)" in first.stdout
    replay = await run(cli_env, "deployments", "register", str(reg))
    assert replay.exit_code == 0, replay.output  # same file, same key: a replay

    profile = tmp_path / "profile.yaml"
    profile.write_text(
        yaml.safe_dump(profile_event("cli-agent", ["cli/coder"], {"tool-calling": 0.9}))
    )
    published = await run(cli_env, "profiles", "publish", str(profile))
    assert published.exit_code == 0 and "activated cli-agent version 1" in published.stdout
    same = await run(cli_env, "profiles", "publish", str(profile))
    assert same.exit_code == 0 and "unchanged: cli-agent version 1" in same.stdout
    changed = tmp_path / "changed.yaml"
    changed.write_text(
        yaml.safe_dump(
            profile_event("cli-agent", ["cli/coder"], {"tool-calling": 0.9}, maxOutputTokens=99)
        )
    )
    clash = await run(cli_env, "profiles", "publish", str(changed))
    assert clash.exit_code == 1 and "activated" not in clash.stdout
    assert "409" in clash.stderr and "profile.maxOutputTokens: 4096 → 99" in clash.stderr

    listed = await run(cli_env, "deployments", "list")
    assert "cli/coder" in listed.stdout and "Candidate" in listed.stdout
    profiles = await run(cli_env, "profiles", "list")
    assert "cli-agent" in profiles.stdout and "Chat" in profiles.stdout

    early = await run(cli_env, "deployments", "approve", "cli/coder")
    assert early.exit_code == 1
    assert "Candidate" in early.stderr

    await record_evidence(temporal_client, tenant, "cli/coder", {"tool-calling": 0.7})
    refused = await run(cli_env, "deployments", "approve", "cli/coder")
    assert refused.exit_code == 1
    assert "no license metadata" in refused.stderr
    assert "cli-agent requires tool-calling >= 0.9; measured 0.7" in refused.stderr

    shown = await run(cli_env, "deployments", "show", "cli/coder")
    assert "tool-calling" in shown.stdout and "0.7" in shown.stdout
    detail = await run(cli_env, "profiles", "show", "cli-agent")
    assert "cli/coder" in detail.stdout and "Evaluated" in detail.stdout

    retired = await run(cli_env, "deployments", "retire", "cli/coder")
    assert retired.exit_code == 0 and "retired cli/coder" in retired.stdout
    after = await run(cli_env, "deployments", "approve", "cli/coder")
    assert after.exit_code == 1 and "Retired" in after.stderr

    gone = await run(
        cli_env, "profiles", "retire", "cli-agent", "1", "--release-id", "rel-cli-agent-1"
    )
    assert gone.exit_code == 0, gone.output


async def test_cli_without_credentials_or_with_bad_input_exits_non_zero(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    no_creds = {k: v for k, v in cli_env.items() if "CLIENT" not in k}
    result = await run(no_creds, "deployments", "list")
    assert result.exit_code == 2 and "MODEL_ROUTER_CLIENT_ID" in result.stderr

    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(deployment_body("cli/bad", privacyClass="Whatever")))
    result = await run(cli_env, "deployments", "register", str(bad))
    assert result.exit_code == 1 and "body.privacyClass" in result.stderr

    wrong = {**cli_env, "MODEL_ROUTER_CLIENT_SECRET": "nope"}
    result = await run(wrong, "profiles", "list")
    assert result.exit_code == 1 and "401" in result.stderr


async def test_route_preview_prints_kept_and_excluded_with_reasons(
    cli_env: dict[str, str], tmp_path: Path, tenant: str, temporal_client: Client, http: Any
) -> None:
    auth = {"Authorization": f"Bearer {await _token(cli_env, http)}"}
    for dep, privacy in (("cli/regional", "Regional"), ("cli/external", "External")):
        await register_via_api(http, auth, dep, privacyClass=privacy)
        await record_evidence(temporal_client, tenant, dep, {"tool-calling": 0.95})
        assert (
            await http.post(f"/factory/model-deployments/{dep}/approve", headers=auth)
        ).status_code == 200
    event = profile_event("cli-route", ["cli/regional", "cli/external"], privacyClass="External")
    assert (await http.post("/factory/asset-events", json=event, headers=auth)).status_code == 200

    result = await run(cli_env, "route", "preview", "cli-route", "--data-class", "Confidential")
    assert result.exit_code == 0, result.output
    assert "kept" in result.stdout and "excluded" in result.stdout
    assert "privacy class External not allowed by tenant policy" in result.stdout
    other = await run(cli_env, "route", "preview", "cli-route", "--tenant", "someone-else")
    assert other.exit_code == 2 and "someone-else" in other.stderr


async def _token(env: dict[str, str], http: Any) -> str:
    resp = await http.post(
        "/oauth/token",
        data={"grant_type": "client_credentials"},
        auth=(env["MODEL_ROUTER_CLIENT_ID"], env["MODEL_ROUTER_CLIENT_SECRET"]),
    )
    return str(resp.json()["access_token"])
