"""The operator CLI against the running API: readable tables, non-zero exit with the reason."""

from __future__ import annotations

import http.server
import json
import threading
import uuid
from pathlib import Path
from typing import Any

import httpx
import jwt
import yaml
from openai import AsyncOpenAI
from temporalio.client import Client

from core.settings import Settings
from providers.upstream import UpstreamServer
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

    retired = await run(cli_env, "deployments", "retire", "cli/coder", "--yes")
    assert retired.exit_code == 0 and "retired cli/coder" in retired.stdout
    after = await run(cli_env, "deployments", "approve", "cli/coder")
    assert after.exit_code == 1 and "Retired" in after.stderr

    gone = await run(
        cli_env, "profiles", "retire", "cli-agent", "1", "--release-id", "rel-cli-agent-1"
    )
    assert gone.exit_code == 0, gone.output


async def test_cli_without_credentials_or_with_bad_input_exits_non_zero(
    cli_env: dict[str, str], tmp_path: Path, settings: Settings
) -> None:
    no_creds = {k: v for k, v in cli_env.items() if "CLIENT" not in k}
    result = await run(no_creds, "deployments", "list")
    assert result.exit_code == 2 and "MODEL_ROUTER_CLIENT_ID" in result.stderr

    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(deployment_body("cli/bad", privacyClass="Whatever")))
    result = await run(cli_env, "deployments", "register", str(bad))
    assert result.exit_code == 1 and "body.privacyClass" in result.stderr

    # The server's words as they are: a pattern's `[a-z0-9]` was read as rich markup and
    # vanished from what the operator saw.
    upper = tmp_path / "upper.yaml"
    upper.write_text(yaml.safe_dump(deployment_body("cli/upper", provider="OpenAI")))
    result = await run(cli_env, "deployments", "register", str(upper))
    assert result.exit_code == 1 and "body.provider" in result.stderr
    assert "[a-z0-9][a-z0-9_-]{0,63}" in result.stderr, result.stderr

    # An unquoted date in YAML (a profile's version here) is sent as the text it is: it was a
    # date object JSON could not carry, and the CLI ended in a traceback.
    dated = tmp_path / "dated.yaml"
    dated.write_text(
        yaml.safe_dump(profile_event("cli-dated", ["cli/none"])).replace(
            "version: '1'", "version: 2025-06-01"
        )
    )
    assert "version: 2025-06-01" in dated.read_text()
    result = await run(cli_env, "profiles", "publish", str(dated))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output

    # An id httpx would resolve to another (`team/../prod` is sent as `prod`) is refused
    # before any request: `retire team/../prod` retired prod.
    result = await run(cli_env, "deployments", "retire", "team/../cli/upper")
    assert result.exit_code == 2 and "must not be empty, '.' or '..'" in result.stderr

    wrong = {**cli_env, "MODEL_ROUTER_CLIENT_SECRET": "nope"}
    result = await run(wrong, "profiles", "list")
    assert result.exit_code == 1 and "401" in result.stderr

    # A tenant id with a `/` could name another tenant's workflows (domain/tenants.py).
    result = await run(
        cli_env,
        *("clients", "create", "--tenant", "acme/prod", "--client-id", "c"),
        *("--role", "Operator", "--scope", "factory.models.read"),
    )
    assert result.exit_code == 2 and "--tenant" in result.stderr
    # A client id HTTP Basic cannot carry (split at its first colon) could never sign in.
    result = await run(
        cli_env,
        *("clients", "create", "--tenant", "acme", "--client-id", "ops:bot"),
        *("--role", "Operator", "--scope", "factory.models.read"),
    )
    assert result.exit_code == 2 and "--client-id" in result.stderr
    # Another tenant's client id is refused in words, not a traceback.
    result = await run(
        {**cli_env, "MODEL_ROUTER_DATABASE_URL": settings.database_url},
        *("clients", "create", "--tenant", "someone-else"),
        *("--client-id", cli_env["MODEL_ROUTER_CLIENT_ID"]),
        *("--role", "Operator", "--scope", "factory.models.read"),
    )
    assert result.exit_code == 1, result.output
    assert "belongs to another tenant" in result.stderr and "Traceback" not in result.output


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
    # The filters applied and the weights, as the spec's preview names them.
    said = " ".join(result.stdout.split())
    assert "constraints" in said and "dataClassification=Confidential" in said, said
    assert "capabilities=tool-calling:0.8" in said and "weights capability=0.5" in said, said
    other = await run(cli_env, "route", "preview", "cli-route", "--tenant", "someone-else")
    assert other.exit_code == 2 and "someone-else" in other.stderr


async def _token(env: dict[str, str], http: Any) -> str:
    resp = await http.post(
        "/oauth/token",
        data={"grant_type": "client_credentials"},
        auth=(env["MODEL_ROUTER_CLIENT_ID"], env["MODEL_ROUTER_CLIENT_SECRET"]),
    )
    return str(resp.json()["access_token"])


async def test_the_cli_records_a_license_and_lists_a_runs_receipts(
    cli_env: dict[str, str],
    tmp_path: Path,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
    api_url: str,
) -> None:
    """register → license (no curl) → evidence → approve → invoke → `receipts list --run`."""
    reg = tmp_path / "deployment.yaml"
    reg.write_text(
        yaml.safe_dump(
            deployment_body(
                "cli/licensed",
                provider="local-upstream",
                model="cli-echo",
                endpointRef=upstream.endpoint_ref,
                licenseMetadata=None,
            )
        )
    )
    assert (await run(cli_env, "deployments", "register", str(reg))).exit_code == 0
    unsaid = await run(cli_env, "deployments", "license", "cli/licensed")
    assert unsaid.exit_code == 2 and "--commercial-use" in unsaid.stderr
    licensed = await run(
        cli_env, "deployments", "license", "cli/licensed", "--commercial-use",
        "--fine-tuning", "--license-name", "apache-2.0",
    )  # fmt: skip
    assert licensed.exit_code == 0, licensed.output
    row = next(line for line in licensed.stdout.splitlines() if "apache-2.0" in line).split()
    assert [c for c in row if c in ("yes", "no")] == ["yes", "no", "yes", "no"]

    await record_evidence(temporal_client, tenant, "cli/licensed", {"tool-calling": 0.95})
    approved = await run(cli_env, "deployments", "approve", "cli/licensed")
    assert approved.exit_code == 0, approved.output
    profile = tmp_path / "profile.yaml"
    profile.write_text(yaml.safe_dump(profile_event("cli-run", ["cli/licensed"])))
    assert (await run(cli_env, "profiles", "publish", str(profile))).exit_code == 0

    run_id = str(uuid.uuid4())
    async with httpx.AsyncClient(base_url=api_url) as http:
        token = await _token(cli_env, http)
    async with AsyncOpenAI(base_url=f"{api_url}/v1", api_key=token, max_retries=0) as sdk:
        for text in ("one", "two"):
            await sdk.chat.completions.create(
                model="cli-run",
                messages=[{"role": "user", "content": text}],
                extra_headers={"X-Run-Id": run_id},
            )
    listed = await run(cli_env, "receipts", "list", "--run", run_id)
    assert listed.exit_code == 0, listed.output
    rows = [line for line in listed.stdout.splitlines() if "cli/licensed" in line]
    assert len(rows) == 2
    assert all("Completed" in r and "cli-run" in r and "Reported" in r for r in rows)
    assert "OUTCOME" in listed.stdout and "USAGE" in listed.stdout
    empty = await run(cli_env, "receipts", "list", "--run", str(uuid.uuid4()))
    assert empty.exit_code == 0 and "no receipts" in empty.stdout
    bad = await run(cli_env, "receipts", "list", "--run", "not-a-uuid")
    assert bad.exit_code == 2 and "--run" in bad.stderr  # refused before any request


async def test_the_servers_words_are_printed_as_they_are_never_as_markup(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    # A price basis is free text: `[/1k]` raised rich's MarkupError (a traceback), and
    # `[token]` vanished as a style.
    basis = "per [/1k] [token]"
    profile = tmp_path / "profile.yaml"
    profile.write_text(yaml.safe_dump(profile_event("cli-markup", [], {}, priceBasis=basis)))
    published = await run(cli_env, "profiles", "publish", str(profile))
    assert published.exit_code == 0, published.output
    shown = await run(cli_env, "profiles", "show", "cli-markup")
    assert shown.exit_code == 0 and "Traceback" not in shown.output, shown.output
    assert basis in shown.stdout


class _Broken(http.server.BaseHTTPRequestHandler):
    """An API answering its token and then as a broken proxy in front of it would: a 502 whose
    JSON body is not a problem, or the connection closed before any answer."""

    def do_POST(self) -> None:  # the token
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        token = jwt.encode({"tid": "t-broken"}, "k", algorithm="HS256")
        self._send(200, {"access_token": token, "token_type": "Bearer"})

    def do_GET(self) -> None:
        if self.path.startswith("/factory/model-profiles"):
            self._send(502, ["upstream", "went", "away"])
        elif self.path.startswith("/factory/runs/"):
            page = b"<html><body><h1>502 Bad Gateway</h1>" + b"<p>nginx</p>" * 500 + b"</html>"
            self.send_response(502)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)
        else:
            self.close_connection = True  # no answer at all

    def _send(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_: object) -> None:
        pass


class _Redirecting(http.server.BaseHTTPRequestHandler):
    """An ingress sending plain HTTP on to HTTPS."""

    def do_POST(self) -> None:
        self.send_response(308)
        self.send_header("Location", f"https://api.example{self.path}")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: object) -> None:
        pass


async def test_a_redirecting_address_is_an_exit_naming_where_it_points(
    cli_env: dict[str, str],
) -> None:
    # The redirect's empty body was read as the token's JSON: a traceback.
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Redirecting)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        env = {**cli_env, "MODEL_ROUTER_API_URL": f"http://127.0.0.1:{server.server_port}"}
        result = await run(env, "profiles", "list")
        assert result.exit_code == 2, result.output
        assert "redirects to https://api.example/oauth/token" in result.stderr
        assert "Traceback" not in result.output
    finally:
        server.shutdown()
        thread.join()


async def test_a_broken_answer_or_none_after_the_token_is_an_exit_with_the_reason(
    cli_env: dict[str, str],
) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Broken)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        env = {**cli_env, "MODEL_ROUTER_API_URL": f"http://127.0.0.1:{server.server_port}"}
        # Not the API's answer (a proxy's, while the API is down): not a refusal, exit 2.
        result = await run(env, "profiles", "list")
        assert result.exit_code == 2, result.output
        assert "502" in result.stderr and "Traceback" not in result.output
        assert "not the API's answer" in result.stderr
        result = await run(env, "receipts", "list", "--run", str(uuid.uuid4()))
        assert result.exit_code == 2, result.output
        assert "Bad Gateway" in " ".join(result.stderr.split())
        assert len(result.stderr) < 600  # the page's start, not all of it
        result = await run(env, "deployments", "list")
        assert result.exit_code == 2, result.output
        assert "did not answer GET /factory/model-deployments" in result.stderr
    finally:
        server.shutdown()
        thread.join()
