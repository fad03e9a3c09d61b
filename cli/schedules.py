"""`model-router schedules list|trigger|pause|resume`: the health-probe and reconciler schedules,
straight against Temporal (the same settings as the worker: address, namespace, TLS, prefix)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

import typer
from rich.markup import escape
from rich.table import Table
from temporalio.client import (
    Client,
    ScheduleHandle,
    WorkflowFailureError,
)
from temporalio.service import RPCError, RPCStatusCode

from cli.output import err, print_json, stdout, table
from core.schedule_spec import spec_text
from core.schedules import NAMES, schedule_id
from core.settings import get_settings
from core.temporal import connect

schedules = typer.Typer(help="The health-probe and reconciler schedules.", no_args_is_help=True)
T = TypeVar("T")
# What Temporal's client says when the server did not answer (the connection lost, the server
# restarting, its frontend overloaded): out of reach, as at connect, not a refusal.
_OUT_OF_REACH = (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED)


def _known(name: str) -> str:
    """NAME checked as the command line is read: an unknown one is a usage error (exit 2, as
    every other refusal of what was typed), before Temporal is asked anything. It exited 1,
    the code of Temporal's own refusal, so a script could not tell a typo from a failure."""
    if name in NAMES or name.startswith(get_settings().schedule_id_prefix + "/"):
        return name
    raise typer.BadParameter(
        f"Unknown schedule {name!r}: use one of {', '.join(NAMES)}, or a full schedule id"
    )


Name = Annotated[
    str,
    typer.Argument(
        help=f"{' or '.join(NAMES)} (or the full schedule id)",
        show_default=False,
        callback=_known,
    ),
]


def _run(action: Callable[[Client], Awaitable[T]]) -> T:
    async def go() -> T:
        try:
            client = await connect(get_settings())
        except Exception as exc:  # any connect failure: say which server, exit 2
            err.print(
                f"[red]Cannot reach Temporal at {get_settings().temporal_address}: "
                f"{escape(str(exc))}"
            )
            raise typer.Exit(2) from None
        try:
            return await action(client)
        except RPCError as exc:
            if exc.status is RPCStatusCode.NOT_FOUND:
                err.print(f"[red]No such schedule ({escape(exc.message)}).[/red]")
                raise typer.Exit(1) from None
            if exc.status in _OUT_OF_REACH:
                err.print(
                    f"[red]Temporal at {escape(get_settings().temporal_address)} is out of "
                    f"reach: {exc.status.name} ({escape(exc.message)}); try again[/red]"
                )
                raise typer.Exit(2) from None
            err.print(f"[red]Temporal refused: {exc.status.name} ({escape(exc.message)})[/red]")
            raise typer.Exit(1) from None
        except WorkflowFailureError as exc:  # trigger --wait: the run itself failed
            cause = exc.cause
            err.print(
                f"[red]The run failed: {escape(str(cause if cause is not None else exc))}[/red]"
            )
            raise typer.Exit(1) from None

    return asyncio.run(go())


def _id(name: str) -> str:
    """The schedule id of a NAME `_known` took: a known name's, or the full id given."""
    return schedule_id(get_settings(), name) if name in NAMES else name


@schedules.command("list")
def list_(
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print the schedules as one JSON array (id, spec, state, overlap, lastRun, "
            "nextRun, note; null where there is none) instead of a table, for scripts",
        ),
    ] = False,
) -> None:
    """The schedules with their spec, state, last and next run."""

    async def describe(client: Client) -> list[dict[str, Any]]:
        found = []
        for name in NAMES:
            sid = schedule_id(get_settings(), name)
            try:
                d = await client.get_schedule_handle(sid).describe()
            except RPCError as exc:
                if exc.status is not RPCStatusCode.NOT_FOUND:
                    raise
                found.append(dict.fromkeys(_FIELDS) | {"id": sid, "state": "missing"})
                continue
            recent = d.info.recent_actions
            nxt = d.info.next_action_times
            found.append(
                {
                    "id": sid,
                    "spec": spec_text(d.schedule.spec),
                    "state": "paused" if d.schedule.state.paused else "active",
                    "overlap": d.schedule.policy.overlap.name,
                    "lastRun": recent[-1].scheduled_at.isoformat() if recent else None,
                    "nextRun": nxt[0].isoformat() if nxt else None,
                    "note": d.schedule.state.note or None,
                }
            )
        return found

    found = _run(describe)
    if as_json:
        print_json(found)
        return
    t = table("schedules", ("ID", "SPEC (UTC)", "STATE", "OVERLAP", "LAST RUN", "NEXT RUN", "NOTE"))
    for row in found:
        shown = row | {
            "state": "missing (start a worker)" if row["state"] == "missing" else row["state"],
            "note": row["note"] or "",
        }
        # A pause note is the operator's own text: "[ops] …" is not markup.
        t.add_row(*(escape("-" if shown[f] is None else str(shown[f])) for f in _FIELDS))
    stdout().print(t)


# A schedule's fields, in the table's column order.
_FIELDS = ("id", "spec", "state", "overlap", "lastRun", "nextRun", "note")


def _on_handle(name: str, action: Callable[[ScheduleHandle], Awaitable[None]], done: str) -> None:
    sid = _id(name)

    async def go(client: Client) -> None:
        await action(client.get_schedule_handle(sid))

    _run(go)
    stdout().print(f"{done} {sid}")


@schedules.command("trigger")
def trigger(
    name: Name,
    wait: Annotated[
        bool, typer.Option("--wait", help="wait for the run and print what it did")
    ] = False,
    timeout: Annotated[
        float, typer.Option(help="with --wait: give up waiting after this many seconds", min=1)
    ] = 900.0,
) -> None:
    """Run the job now (under the schedule's overlap policy)."""
    if not wait:
        _on_handle(name, lambda h: h.trigger(), "triggered")
        return
    sid = _id(name)

    async def go(client: Client) -> tuple[str, Any]:
        handle = client.get_schedule_handle(sid)
        seen = {_workflow_of(a) for a in (await handle.describe()).info.recent_actions}
        await handle.trigger()
        deadline = asyncio.get_running_loop().time() + 60
        while True:
            actions = (await handle.describe()).info.recent_actions
            started = [w for w in map(_workflow_of, actions) if w and w not in seen]
            if started:
                # Bounded: with no worker polling (when an operator most wants a run by hand)
                # the run never ends, and the command waited for good.
                run = client.get_workflow_handle(started[-1])
                try:
                    return started[-1], await asyncio.wait_for(run.result(), timeout)
                except TimeoutError:
                    err.print(
                        f"[red]{escape(started[-1])} is still running after {timeout:g} s "
                        "(is a worker up?)[/red]"
                    )
                    raise typer.Exit(1) from None
            if asyncio.get_running_loop().time() > deadline:
                err.print(f"[red]{sid} started no run within 60 s (paused, or overlapping?)")
                raise typer.Exit(1)
            await asyncio.sleep(0.3)  # polling Temporal for the run the trigger started

    workflow_id, result = _run(go)
    out = stdout()
    out.print(f"triggered {sid}: {workflow_id}")
    out.print(_report_table(result))
    failed = left_undone(result)
    if failed:
        left = escape("; ".join(failed))
        err.print(f"[red]The run completed, but left {left} (tried again next run).")
        raise typer.Exit(1)


def left_undone(result: Any) -> list[str]:
    """What a completed run reports it could not do (the reconciler's failed days and
    statement sources, the sweeper's failed prunes), so that `trigger --wait` in a script fails
    on it: the run itself completes, and the next one tries them again."""
    if not isinstance(result, dict):
        return []
    days = result.get("failed_windows") or {}
    sources = result.get("failed_sources") or {}
    # Each "step: error type" (a sweeper run from before the field reports none).
    prunes = [str(failure).partition(": ") for failure in result.get("prune_failures") or []]
    return (
        [f"day {day} unreconciled ({why})" for day, why in sorted(days.items())]
        + [f"source {source} unread ({why})" for source, why in sorted(sources.items())]
        + [f"{step} undone ({why or 'failed'})" for step, _, why in prunes]
    )


def _workflow_of(action: Any) -> str | None:
    return getattr(action.action, "workflow_id", None)


def _report_table(result: Any) -> Table:
    """A run's report as rows: counters, and each mapping (skipped reasons, sources) spelled
    out, so an operator sees what was left as it is and why."""
    table = Table(show_header=False, box=None)
    table.add_column("", style="bold", overflow="fold")
    table.add_column("", overflow="fold")
    for key, value in (result or {}).items() if isinstance(result, dict) else []:
        if isinstance(value, dict):
            if not value:
                table.add_row(key, "-")
            for inner, count in value.items():
                table.add_row(escape(key), escape(f"{count}  {inner}"))
        else:
            table.add_row(escape(key), escape(str(value)))
    return table


@schedules.command("pause")
def pause(
    name: Name,
    note: Annotated[str, typer.Option(help="Why (shown by list)")] = "paused from the CLI",
) -> None:
    """Stop scheduled runs until resumed (a manual trigger still runs)."""
    _on_handle(name, lambda h: h.pause(note=note), "paused")


@schedules.command("resume")
def resume(
    name: Name,
    note: Annotated[str, typer.Option(help="Why (shown by list)")] = "resumed from the CLI",
) -> None:
    """Resume scheduled runs."""
    _on_handle(name, lambda h: h.unpause(note=note), "resumed")
