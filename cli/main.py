"""`model-router`: run the service's processes and manage what operators manage."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from typer._click.exceptions import UsageError  # click as typer vendors it; not re-exported
from typer.core import TyperGroup

from cli import catalog, receipts, route, schedules
from core.settings import Settings, get_settings
from domain.enums import Role, Scope


class _Commands(TyperGroup):
    """Every command, with settings that do not validate reported as which and why (exit 2).
    Settings are built inside the commands, when first needed; pydantic's traceback printed
    every value read, a client secret among them."""

    # ctx is typer's click Context (typer vendors click): Any, as no public name covers it.
    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except UsageError as exc:
            # A command's usage error (an unknown schedule NAME, a bad option) as click prints
            # it when stderr is not a terminal: typer's boxed panel was wrapped at 80 columns
            # there, and a script grepping stderr for the message missed it (cli/output.py keeps
            # our own messages whole). Help and a terminal's errors keep typer's panels.
            if sys.stderr.isatty():
                raise
            exc.show()
            raise typer.Exit(exc.exit_code) from None
        except ValidationError as exc:
            if exc.title != Settings.__name__:
                raise
            typer.echo("invalid settings:", err=True)
            for error in exc.errors(include_url=False, include_context=False, include_input=False):
                # A check across settings (RS256 needs a JWKS URL) has no single name: its
                # message names them.
                name = f"MODEL_ROUTER_{str(error['loc'][0]).upper()}: " if error["loc"] else ""
                typer.echo(f"  {name}{error['msg']}", err=True)
            raise typer.Exit(2) from None


app = typer.Typer(
    cls=_Commands,
    help="model-router: a model-access gateway on Temporal.",
    no_args_is_help=True,
)
db_app = typer.Typer(help="Database migrations.", no_args_is_help=True)
clients_app = typer.Typer(help="OAuth clients.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(clients_app, name="clients")
app.add_typer(catalog.deployments, name="deployments")
app.add_typer(catalog.profiles, name="profiles")
app.add_typer(route.route, name="route")
app.add_typer(receipts.receipts, name="receipts")
app.add_typer(schedules.schedules, name="schedules")


@app.command()
def api(
    host: Annotated[str | None, typer.Option(help="Bind address (default: settings)")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default: settings)")] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="API processes sharing the port, each with its own in-process invocation "
            "workers and caller queue (default: settings, 1)",
        ),
    ] = None,
) -> None:
    """Run the HTTP API."""
    import uvicorn

    settings = get_settings()
    uvicorn.run(
        "api.app:create_app",
        factory=True,
        host=host or settings.api_host,
        port=port if port is not None else settings.api_port,
        # One process runs on one core (one event loop, one GIL): N processes use N. Each builds
        # its own runtime from the factory, so its caller queue and hub are its own.
        workers=workers or settings.api_workers,
        # Behind an ingress the peer is the proxy, never 127.0.0.1: without this the console
        # cookie went out without Secure and anonymous callers shared the proxy's rate bucket.
        forwarded_allow_ips=settings.forwarded_allow_ips,
        log_level="info",
        access_log=False,
        # On SIGTERM, calls in flight get their whole budget to finish, and no more: then the
        # app's own stop closes what is left as ended by us. Without a bound uvicorn waited for
        # every response, and the platform's SIGKILL came first, cutting streams with no
        # final event. deploy/ gives the process this long and a margin (shutdown_grace).
        timeout_graceful_shutdown=shutdown_grace(settings),
    )


def shutdown_grace(settings: Settings) -> int:
    """Seconds a stopping API lets calls in flight finish: one invocation's budget and 5 s."""
    return int(settings.default_timeout_seconds) + 5


@app.command()
def worker() -> None:
    """Run the Temporal worker."""
    import worker as worker_module

    worker_module.main()


# `db upgrade`'s and `db downgrade`'s exit status when a statement's wait for a table lock
# outlasted every attempt: distinct from 1 (any other failure) and 2 (usage, settings), so that
# the migrate Job fails at once on it (deploy/k8s/migrate-job.yaml's podFailurePolicy) rather
# than running the same stall again in every pod its backoffLimit allows.
LOCK_TIMEOUT_EXIT = 3

_LOCK_TIMEOUT_HELP = (
    f" Exits {LOCK_TIMEOUT_EXIT} when another transaction held a table lock through every"
    " attempt (the message names the statement, the query to find the transaction and the"
    " command to run again once it has ended)."
)


@contextmanager
def _lock_timeout_exit() -> Iterator[None]:
    """MigrationLockTimeout as its message and LOCK_TIMEOUT_EXIT, not a traceback: the message
    is what the operator acts on."""
    from store.migrate import MigrationLockTimeout

    try:
        yield
    except MigrationLockTimeout as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(LOCK_TIMEOUT_EXIT) from None


@db_app.command(
    "upgrade",
    short_help="Apply migrations up to REVISION (default head).",
    help="Apply migrations up to REVISION (default head)." + _LOCK_TIMEOUT_HELP,
)
def db_upgrade(revision: str = "head") -> None:
    from cli.database import database_exit, revision_exit
    from store.migrate import code_head, upgrade

    url = get_settings().database_url
    with (
        _lock_timeout_exit(),
        database_exit(url),
        revision_exit(f"db upgrade --revision {revision} (this code's newest is {code_head()})"),
    ):
        ahead = upgrade(url, revision)
    if ahead is not None:
        # Exit 0: the migrate step after a rollback of the code must succeed, or what waits on
        # it (compose's api and worker) never starts.
        typer.echo(f"database at {ahead}, newer than this code's head {code_head()}; nothing to do")
        return
    typer.echo(f"database at {revision}")


@db_app.command(
    "downgrade",
    short_help="Revert migrations down to REVISION (e.g. base); needs --yes.",
    help="Revert migrations down to REVISION (e.g. base); needs --yes." + _LOCK_TIMEOUT_HELP,
)
def db_downgrade(
    revision: str,
    yes: Annotated[
        bool, typer.Option("--yes", help="Confirm: reverting drops tables and their data")
    ] = False,
) -> None:
    if not yes:
        # Reverting drops tables with their rows: one mistyped command lost the data.
        typer.echo(
            f"db downgrade {revision} would revert every migration after {revision}, dropping "
            "the tables and columns they added with their data: add --yes to do it",
            err=True,
        )
        raise typer.Exit(2)
    from cli.database import database_exit, revision_exit
    from store.migrate import downgrade

    url = get_settings().database_url
    with _lock_timeout_exit(), database_exit(url), revision_exit(f"db downgrade {revision}"):
        downgrade(url, revision)
    typer.echo(f"database at {revision}")


@clients_app.command("create")
def clients_create(
    tenant: Annotated[str, typer.Option(help="Tenant the client acts for (created if new)")],
    client_id: Annotated[str, typer.Option("--client-id")],
    role: Annotated[list[Role], typer.Option(help="Role (repeatable)")],
    scope: Annotated[list[Scope], typer.Option(help="Allowed scope (repeatable)")],
    rotate: Annotated[
        bool,
        typer.Option(
            "--rotate",
            help="Re-key an existing client: a new secret (the old one stops working), these "
            "roles and scopes; a disabled client stays disabled",
        ),
    ] = False,
) -> None:
    """Create an OAuth client (or, with --rotate, re-key one); prints its secret once."""
    from core.security import new_client_secret
    from domain.tenants import TENANT_ID_RULE, is_tenant_id

    if not is_tenant_id(tenant):
        raise typer.BadParameter(f"not a tenant id: {TENANT_ID_RULE}", param_hint="--tenant")
    if ":" in client_id or not 1 <= len(client_id) <= 100 or not client_id.isprintable():
        # HTTP Basic splits at the first colon: such a client could never sign in.
        raise typer.BadParameter(
            "1 to 100 printable characters, no colon", param_hint="--client-id"
        )
    from sqlalchemy.exc import IntegrityError

    from cli.database import database_exit
    from store.clients import ClientExists, ClientWritten, create_client
    from store.db import create_engine, session_factory

    secret = new_client_secret()
    url = get_settings().database_url

    async def _run() -> ClientWritten:
        engine = create_engine(url)
        try:
            return await create_client(
                session_factory(engine),
                tenant_id=tenant,
                client_id=client_id,
                secret=secret,
                roles=role,
                scopes=scope,
                rotate=rotate,
            )
        finally:
            await engine.dispose()

    # A database failure (out of reach, never migrated) as its message; the refusals first,
    # IntegrityError being a database error too.
    with database_exit(url):
        try:
            written = asyncio.run(_run())
        except ValueError as exc:  # the client id belongs to another tenant
            typer.echo(f"refused: {exc}", err=True)
            raise typer.Exit(1) from None
        except ClientExists:
            # Re-keying replaced the secret the service using it signs in with, and its roles.
            typer.echo(
                f"client {client_id!r} of tenant {tenant!r} exists; nothing changed. Add "
                "--rotate to give it a new secret (the old one stops working), these roles and "
                "these scopes",
                err=True,
            )
            raise typer.Exit(2) from None
        except IntegrityError:
            typer.echo(
                f"client {client_id!r} or tenant {tenant!r} was created by another run at the "
                "same time; nothing changed by this one: run it again",
                err=True,
            )
            raise typer.Exit(2) from None
    # Said apart: a typo in --tenant made a new, empty tenant without a word.
    whose = f"new tenant {tenant}" if written.new_tenant else f"tenant {tenant}"
    typer.echo(f"{'re-keyed' if written.rekeyed else 'created'} client {client_id} of {whose}")
    if written.disabled:
        typer.echo(
            f"client {client_id} is disabled and stays so: the new secret signs in only once it "
            "is enabled again",
            err=True,
        )
    typer.echo(f"client_id={client_id}\nclient_secret={secret}")


@app.command()
def dev(
    data_dir: Annotated[Path, typer.Option(help="Where state lives between runs")] = Path(".data"),
    api_port: int = 8000,
    temporal_port: int = 7233,
    ui_port: int = 8233,
    upstream_port: Annotated[int, typer.Option(help="The local upstream simulator")] = 8787,
    worker_metrics_port: Annotated[int, typer.Option(help="The worker's GET /metrics")] = 9464,
) -> None:
    """Bring the whole service up on the embedded default (Temporal dev server + SQLite)."""
    from cli.dev import DevStack

    logging.basicConfig(level=logging.WARNING)
    stack = DevStack(data_dir, api_port, temporal_port, ui_port, upstream_port, worker_metrics_port)
    raise typer.Exit(stack.run())


if __name__ == "__main__":
    app()
