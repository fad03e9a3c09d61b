"""`model-router deployments evaluate --wait`: following one evaluation to its end, within a
bound, and saying how a wait that ran out ended (exit 1: still running; 2: the API out of
reach)."""

from __future__ import annotations

import time
from typing import Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from cli.http import Api, WaitEnded, err
from cli.output import print_table as _table
from cli.output import stdout


def wait_for_evaluation(
    api: Api, deployment_id: str, path: str, ev: dict[str, Any], timeout: float
) -> None:
    """`deployments evaluate --wait`: a progress bar until the evaluation `ev` ends, then its
    score table; exit 1 when it Failed, was replaced, or still runs at `timeout`."""
    started = ev["evaluationId"]
    # Only the evaluation this command started (or, with a key used before, replayed) is waited
    # on and shown. The deployment's view shows its latest: a replayed evaluation that had ended
    # was waited past, and another started meanwhile (the console's) was shown as this one.
    # Bounded: with no worker polling, the evaluation never ends, and the command waited for
    # good. Each poll rides out the API's restart or outage until then (Api.poll).
    deadline = time.monotonic() + timeout
    d = _poll_evaluation(api, path, deadline, started, timeout, seen=False)
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), console=stdout()
    ) as bar:
        task = bar.add_task("cases", total=None)
        while ev.get("status") not in ("Completed", "Failed"):
            time.sleep(0.5)  # polling the API at a human pace
            d = _poll_evaluation(api, path, deadline, started, timeout, seen=True)
            latest = d.get("evaluation") or {}
            if latest.get("evaluationId") != started:
                err.print(
                    f"[yellow]evaluation {escape(started)} is no longer the deployment's latest "
                    f"({escape(str(latest.get('evaluationId')))} started since): its outcome is "
                    "not shown here[/yellow]"
                )
                raise typer.Exit(1)
            ev = latest
            progress = ev.get("progress") or {}
            if progress.get("total"):
                bar.update(task, total=progress["total"], completed=progress["done"])
    if ev["status"] == "Failed":
        err.print(f"[red]evaluation failed: {escape(str(ev.get('reason')))}[/red]")
        raise typer.Exit(1)
    scores = (ev.get("summary") or {}).get("scores", {})
    _table(
        f"capabilities of {deployment_id} ({d['state']})",
        ["CAPABILITY", "PASS RATE", "VERDICT"],
        [[c, f"{s['score']:.2f}", s["verdict"]] for c, s in sorted(scores.items())],
    )
    for shortfall in (ev.get("summary") or {}).get("shortfalls", []):
        err.print(f"[yellow]below a listing profile: {escape(shortfall['message'])}[/yellow]")


def _poll_evaluation(
    api: Api, path: str, deadline: float, started: str, timeout: float, *, seen: bool
) -> Any:
    """The deployment, read for `evaluate --wait` until its deadline; `seen`: the wait has read
    the evaluation running already."""
    try:
        return api.poll("GET", path, deadline)
    except WaitEnded as ended:
        raise _wait_ended(ended, started, timeout, seen=seen) from None


def _wait_ended(ended: WaitEnded, started: str, timeout: float, *, seen: bool) -> typer.Exit:
    """How a wait that reached its --timeout ends. The evaluation seen running: exit 1, as the
    evaluation is still running, whatever the API did last (a deadline reached inside a poll, or
    a 503 in the wait's last second, ended an hour's wait with exit 2, "come back"). The API not
    answering any of the wait's reads: exit 2, the API out of reach."""
    if ended.failure is not None and not seen:
        err.print(
            f"[red]The API {ended.failure} to {ended.request}, and kept so until the wait's "
            f"deadline ({timeout:g} s)[/red]"
        )
        return typer.Exit(2)
    running = f"evaluation {escape(started)} is still running after {timeout:g} s"
    if ended.failure is None:
        err.print(f"[red]{running} (is a worker up?)[/red]")
    else:
        err.print(
            f"[red]{running} as last seen; then the API {ended.failure} to {ended.request} "
            "until the wait's deadline[/red]"
        )
    return typer.Exit(1)
