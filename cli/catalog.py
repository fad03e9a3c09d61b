"""`model-router deployments …` and `model-router profiles …`."""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from cli.evaluation_wait import wait_for_evaluation
from cli.files import load_file
from cli.http import connect, err
from cli.output import JSON_HELP, print_json, stdout
from cli.output import print_table as _table
from domain.deployments import UNADDRESSABLE, addressable
from domain.profile_releases import _NAME as _PROFILE_ID

deployments = typer.Typer(help="Deployments and their ModelOps lifecycle.", no_args_is_help=True)
profiles = typer.Typer(help="Model profiles.", no_args_is_help=True)


def _deployment(deployment_id: str, action: str = "") -> str:
    """The deployment's URL path, refused (exit 2) for an id that would address another once
    sent: httpx resolves `team/../prod` to `prod`, so `retire team/../prod` retired prod."""
    if not addressable(deployment_id):
        err.print(f"[red]{escape(deployment_id)}: {UNADDRESSABLE}[/red]")
        raise typer.Exit(2)
    return f"/factory/model-deployments/{deployment_id}{action}"


def profile_path(profile_id: str, action: str = "") -> str:
    """The profile's URL path, refused (exit 2) for anything but a profile id: the id goes into
    the path as it is, and `../model-deployments/prod/retire?` was sent as
    POST /factory/model-deployments/prod/retire."""
    if not re.fullmatch(_PROFILE_ID, profile_id):
        err.print(
            f"[red]PROFILE_ID {escape(profile_id)}: not a profile id ({escape(_PROFILE_ID)})[/red]"
        )
        raise typer.Exit(2)
    return f"/factory/model-profiles/{profile_id}{action}"


AsJson = Annotated[bool, typer.Option("--json", help=JSON_HELP)]


def _deployment_rows(items: list[dict[str, Any]]) -> list[list[Any]]:
    rows = []
    for d in items:
        caps = d.get("evidence", {}).get("capabilities", {})
        lic = d.get("licenseMetadata") or {}
        rows.append(
            [
                d["deploymentId"],
                d["provider"],
                d["model"],
                d["region"],
                d["privacyClass"],
                d["state"],
                "yes" if d["healthy"] else "no",
                "commercial" if lic.get("commercialUse") else ("none" if not lic else "restricted"),
                f"{len(caps)} capabilities" if caps else "-",
            ]
        )
    return rows


@deployments.command("list")
def deployments_list(as_json: AsJson = False) -> None:
    """List the tenant's deployments."""
    items = connect().call("GET", "/factory/model-deployments")
    if as_json:
        print_json(items)
        return
    _table(
        "deployments",
        ["ID", "PROVIDER", "MODEL", "REGION", "PRIVACY", "STATE", "HEALTHY", "LICENSE", "EVIDENCE"],
        _deployment_rows(items),
    )


@deployments.command("show")
def deployments_show(deployment_id: str, as_json: AsJson = False) -> None:
    """One deployment with its capability evidence."""
    d = connect().call("GET", _deployment(deployment_id))
    if as_json:
        print_json(d)
        return
    _table(
        "deployment",
        ["ID", "PROVIDER", "MODEL", "REGION", "PRIVACY", "STATE", "HEALTHY", "LICENSE", "EVIDENCE"],
        _deployment_rows([d]),
    )
    caps = d.get("evidence", {}).get("capabilities", {})
    if caps:
        _table(
            f"evidence {d['evidence'].get('evidenceRef')}",
            ["CAPABILITY", "SCORE", "VERDICT", "SUITE"],
            [[c, v["score"], v["verdict"], v["suiteVersion"]] for c, v in sorted(caps.items())],
        )


@deployments.command("register")
def deployments_register(
    file: Annotated[Path, typer.Argument(help="YAML or JSON with the registration fields")],
    idempotency_key: Annotated[
        str | None, typer.Option(help="Default: a hash of the file, so a retry is a replay")
    ] = None,
) -> None:
    """Register a Candidate deployment."""
    body = load_file(file)
    key = (
        idempotency_key
        or "cli-" + hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:32]
    )
    d = connect().call(
        "POST", "/factory/model-deployments", json=body, headers={"Idempotency-Key": key}
    )
    stdout().print(f"registered {d['deploymentId']} ({d['state']})")


@deployments.command("license")
def deployments_license(
    deployment_id: str,
    commercial_use: Annotated[
        bool | None,
        typer.Option(
            "--commercial-use/--no-commercial-use",
            help="Whether the license permits commercial use (required: say which)",
            show_default=False,
        ),
    ] = None,
    redistribution: Annotated[bool, typer.Option(help="Redistribution permitted")] = False,
    fine_tuning: Annotated[bool, typer.Option(help="Fine-tuning permitted")] = False,
    customer_deployment: Annotated[
        bool, typer.Option(help="Deployment at customers permitted")
    ] = False,
    license_name: Annotated[str | None, typer.Option(help="e.g. apache-2.0")] = None,
) -> None:
    """Record the license metadata of a Candidate or Evaluated deployment (before approval)."""
    if commercial_use is None:
        err.print(
            "[red]Say whether the license permits commercial use: --commercial-use or "
            "--no-commercial-use.[/red]"
        )
        raise typer.Exit(2)
    body: dict[str, Any] = {
        "commercialUse": commercial_use,
        "redistribution": redistribution,
        "fineTuning": fine_tuning,
        "customerDeployment": customer_deployment,
    }
    if license_name:
        body["licenseName"] = license_name
    d = connect().call("PUT", _deployment(deployment_id, "/license"), json=body)
    lic = d.get("licenseMetadata") or {}
    _table(
        f"license of {d['deploymentId']} ({d['state']})",
        ["LICENSE", "COMMERCIAL USE", "REDISTRIBUTION", "FINE-TUNING", "CUSTOMER DEPLOYMENT"],
        [
            [
                lic.get("licenseName") or "-",
                *(
                    "yes" if lic.get(term) else "no"
                    for term in (
                        "commercialUse",
                        "redistribution",
                        "fineTuning",
                        "customerDeployment",
                    )
                ),
            ]
        ],
    )


@deployments.command("approve")
def deployments_approve(
    deployment_id: str,
    intended_use: Annotated[
        list[str] | None,
        typer.Option(
            help="License term the use needs besides commercialUse, always checked (repeatable)"
        ),
    ] = None,
) -> None:
    """Approve an Evaluated deployment (license and evidence gates)."""
    body = {"intendedUse": intended_use} if intended_use else None
    d = connect().call("POST", _deployment(deployment_id, "/approve"), json=body)
    stdout().print(f"approved {d['deploymentId']} (version {d['version']})")


@deployments.command("retire")
def deployments_retire(
    deployment_id: str,
    yes: Annotated[
        bool,
        typer.Option("--yes", help="Confirm: Retired is final (never routed or approved again)"),
    ] = False,
) -> None:
    """Retire a deployment for good; needs --yes."""
    path = _deployment(deployment_id, "/retire")  # refused before anything else
    if not yes:
        # Retired is the lifecycle's end: one mistyped id took a serving deployment out of
        # every route, with no way back but registering it again under another id.
        err.print(
            f"[red]deployments retire {escape(deployment_id)} would retire it for good (Retired "
            "is final: it is never routed or approved again): add --yes to do it[/red]"
        )
        raise typer.Exit(2)
    d = connect().call("POST", path)
    stdout().print(f"retired {d['deploymentId']}")


@profiles.command("list")
def profiles_list(as_json: AsJson = False) -> None:
    """Active profiles (the newest active version of each)."""
    items = connect().call("GET", "/factory/model-profiles")
    if as_json:
        print_json(items)
        return
    _table(
        "profiles",
        [
            "PROFILE",
            "VERSION",
            "MODALITY",
            "PRIVACY",
            "CONTEXT",
            "OUTPUT",
            "FALLBACK",
            "DEPLOYMENTS",
        ],
        [
            [
                p["profileId"],
                p["version"],
                p["modality"],
                p["privacyClass"],
                p["maxContextTokens"],
                p["maxOutputTokens"],
                " → ".join(p["fallbackChain"]) if p["fallbackEnabled"] else "off",
                len(p["allowedDeployments"]),
            ]
            for p in items
        ],
    )


@profiles.command("show")
def profiles_show(
    profile_id: str,
    version: Annotated[str | None, typer.Option()] = None,
    as_json: AsJson = False,
) -> None:
    """A profile with its requirements and its deployments' evidence."""
    path = profile_path(profile_id)  # refused before any request, the token's included
    params = {"version": version} if version else None
    p = connect().call("GET", path, params=params)
    if as_json:
        print_json(p)
        return
    # The server's words, never read as rich markup: a price basis `per [/1k] tokens` raised
    # MarkupError (a traceback), and `per [token]` lost its word.
    head = escape(
        f"{p['profileId']} v{p['version']} ({p['status']}), {p['modality']}, "
        f"privacy {p['privacyClass']}, price basis {p['priceBasis']}"
    )
    stdout().print(f"[bold]{head}[/bold]")
    _table(
        "required capabilities",
        ["CAPABILITY", "THRESHOLD"],
        [[c, t] for c, t in sorted(p["requiredCapabilities"].items())],
    )
    _table(
        "allowed deployments (preference order)",
        ["DEPLOYMENT", "STATE", "HEALTHY", "ROUTABLE"],
        [
            [d["deploymentId"], d.get("state") or "not registered", d.get("healthy"), d["routable"]]
            for d in p["deployments"]
        ],
    )


@profiles.command("publish")
def profiles_publish(
    file: Annotated[Path, typer.Argument(help="An AssetReleasePublished event as YAML")],
) -> None:
    """Publish a profile release (activation checks the invariants)."""
    resp = connect().request("POST", "/factory/asset-events", json=load_file(file))
    p = resp.json()
    if resp.headers.get("Idempotent-Replay") == "true":
        stdout().print(f"unchanged: {p['profileId']} version {p['version']} is already published")
    else:
        stdout().print(f"activated {p['profileId']} version {p['version']}")


@profiles.command("retire")
def profiles_retire(
    profile_id: str,
    version: str,
    release_id: Annotated[str, typer.Option(help="The release being retired")],
    revoked: Annotated[
        bool, typer.Option(help="Revoked (immediately) rather than deprecated; needs --yes")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", help="Confirm a revocation (final)")] = False,
) -> None:
    """Retire a profile version (runs pinned to it finish on their plans)."""
    if revoked and not yes:
        # A revocation cannot be undone: asked for by a slip of the flag, it ended a release.
        err.print(
            f"[red]profiles retire {escape(profile_id)} {escape(version)} --revoked would revoke "
            "the version for good: add --yes to do it[/red]"
        )
        raise typer.Exit(2)
    event = {
        "eventType": "AssetReleaseRevoked" if revoked else "AssetReleaseDeprecated",
        "releaseId": release_id,
        "profileId": profile_id,
        "version": version,
    }
    p = connect().call("POST", "/factory/asset-events", json=event)
    stdout().print(f"retired {p['profileId']} version {p['version']}")


@deployments.command("evaluate")
def deployments_evaluate(
    deployment_id: str,
    wait: Annotated[bool, typer.Option(help="Show progress and the score table")] = False,
    idempotency_key: Annotated[
        str | None, typer.Option(help="Default: a new key (a new evaluation)")
    ] = None,
    timeout: Annotated[
        float, typer.Option(help="with --wait: give up waiting after this many seconds", min=1)
    ] = 3600.0,
) -> None:
    """Run the capability suite against a deployment."""
    api = connect()
    key = idempotency_key or f"cli-{uuid.uuid4().hex}"
    ev = api.call(
        "POST",
        _deployment(deployment_id, "/evaluate"),
        headers={"Idempotency-Key": key},
    )
    started = ev["evaluationId"]
    stdout().print(f"evaluation {started} ({ev['status']}, suite {ev['suiteVersion']})")
    if not wait:
        return
    wait_for_evaluation(api, deployment_id, _deployment(deployment_id), ev, timeout)
