"""`model-router route preview PROFILE`: the router's decision, explained."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from cli.catalog import profile_path
from cli.http import connect, err
from cli.output import JSON_HELP, print_json, stdout, table
from domain.policy import DataClassification

route = typer.Typer(help="Route plans.", no_args_is_help=True)


@route.command("preview")
def preview(
    profile_id: str,
    data_class: Annotated[
        DataClassification, typer.Option("--data-class", help="Classification of the data")
    ] = DataClassification.INTERNAL,
    tools: Annotated[bool, typer.Option(help="The request uses tools")] = False,
    structured_output: Annotated[bool, typer.Option(help="The request needs JSON output")] = False,
    context_tokens: Annotated[int | None, typer.Option(help="Context the request needs")] = None,
    budget: Annotated[bool, typer.Option(help="A budget applies")] = False,
    tenant: Annotated[
        str | None, typer.Option(help="Must be the client's own tenant (previews never cross)")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help=JSON_HELP)] = False,
) -> None:
    """Kept and excluded candidates with their reasons, without persisting anything."""
    path = profile_path(profile_id, "/route-plan/preview")
    api = connect()
    if tenant is not None and tenant != api.tenant_id:
        err.print(f"[red]This client acts for tenant {api.tenant_id}, not {tenant}.[/red]")
        raise typer.Exit(2)
    body = {
        "dataClassification": data_class.value,
        "needsTools": tools,
        "needsStructuredOutput": structured_output,
        "contextTokens": context_tokens,
        "budgetApplies": budget,
    }
    plan = api.call("POST", path, json=body)
    if as_json:
        print_json(plan)
        return
    out = stdout()
    out.print(
        escape(
            f"{plan['profileId']} v{plan['profileVersion']}  policy {plan['policyRevision']}"
            f"  snapshot {plan['snapshotVersion']}  decision {plan['policyDecisionId']}"
        )
    )
    # What the router filtered on and how it weighed: the spec's preview names the filters
    # applied beside the reasons for exclusion.
    for label, values in (("constraints", plan["constraints"]), ("weights", plan["weights"])):
        said = "  ".join(f"{k}={_shown(v)}" for k, v in values.items())
        out.print(escape(f"{label}  {said}"), soft_wrap=True)
    kept = table(
        "kept (in route order)",
        ("RANK", "DEPLOYMENT", "SCORE", "CAPABILITY", "COST", "LATENCY", "HISTORY"),
    )
    for c in plan["candidates"]:
        t = c["terms"]
        kept.add_row(
            str(c["rank"]),
            escape(c["deploymentId"]),
            f"{c['score']:.3f}",
            f"{t['capability']:.2f}",
            f"{t['cost']:.2f}",
            f"{t['latency']:.2f}",
            f"{t['history']:.2f}",
        )
    out.print(kept)
    excluded = table("excluded", ("DEPLOYMENT", "CODE", "REASON"))
    for e in plan["excluded"]:
        excluded.add_row(escape(e["deploymentId"]), e["code"], escape(e["reason"]))
    out.print(excluded)


def _shown(value: object) -> str:
    """A constraint's or weight's value on one line: a list joined, a mapping as k:v, none as
    `any` (no restriction)."""
    if value is None:
        return "any"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value) or "none"
    if isinstance(value, dict):
        return ",".join(f"{k}:{v}" for k, v in value.items()) or "none"
    return str(value)
