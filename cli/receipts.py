"""`model-router receipts list --run RUN`: the receipts of a run (DESIGN §6), as a table: which
deployment answered, the outcome, the usage and how certain it is, the cost. No content."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

import typer
from rich.markup import escape

from cli.http import connect, err
from cli.output import JSON_HELP, print_json, print_table, stdout

receipts = typer.Typer(help="Invocation receipts.", no_args_is_help=True)

_COLUMNS = (
    "INVOCATION",
    "STARTED (UTC)",
    "PROFILE",
    "DEPLOYMENT",
    "OUTCOME",
    "USAGE",
    "IN",
    "OUT",
    "COST USD",
    "LATENCY MS",
    "FALLBACK",
)


def _row(r: dict[str, Any]) -> list[str]:
    def n(value: Any) -> str:
        return "-" if value is None else str(value)

    return [
        r["invocationId"],
        r["startedAt"].replace("T", " ")[:19],
        r["profileId"],
        r["deploymentId"],
        r["outcome"],
        r["usageStatus"],
        n(r["inputTokens"]),
        n(r["outputTokens"]),
        n(r["estimatedCostUsd"]),
        n(r["latencyMs"]),
        "yes" if r["fallbackUsed"] else "no",
    ]


@receipts.command("list")
def receipts_list(
    run: Annotated[str, typer.Option("--run", help="The run id (a UUID)", show_default=False)],
    as_json: Annotated[
        bool, typer.Option("--json", help=JSON_HELP + " (every page's receipts in one array)")
    ] = False,
) -> None:
    """The receipts of one run, oldest first (every page of them)."""
    try:
        # Checked before it goes into the URL's path, and sent in its plain form: a run of
        # `../model-deployments/prod?` was sent as GET /factory/model-deployments/prod.
        run_id = uuid.UUID(run)
    except ValueError:
        err.print(f"[red]--run {escape(run)}: not a run id (a UUID)[/red]")
        raise typer.Exit(2) from None
    api = connect()
    items: list[dict[str, Any]] = []
    url: str | None = f"/factory/runs/{run_id}/model-receipts"
    while url is not None:
        resp = api.request("GET", url)
        items += resp.json()
        url = resp.links.get("next", {}).get("url")
    if as_json:
        print_json(items)
        return
    print_table(f"receipts of run {run_id}", _COLUMNS, map(_row, items))
    if not items:
        stdout().print("no receipts for this run (a run id of another tenant looks the same)")
