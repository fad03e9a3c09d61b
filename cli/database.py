"""What the commands that open the database themselves (`db upgrade`, `db downgrade`,
`clients create`) say when it fails them: which database (its URL with the password removed)
and why, as a message and an exit status, never a traceback. A refused port ended
`db upgrade` in a ConnectionRefusedError traceback, and `clients create` said "cannot reach
the database" for a database it had reached whose tables were never created."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import quote, quote_plus

import typer
from alembic.util import CommandError
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError

from store.db import SQLiteTooOld

# SQLSTATEs of a statement naming a table or a column the schema lacks: the database was
# reached, and its schema is older than the code (or was never migrated).
_SCHEMA_MISSING = {"42P01", "42703"}  # undefined_table, undefined_column
_SQLITE_SCHEMA_MISSING = ("no such table", "no such column")
_MASK = "***"


def where(url: str) -> str:
    """The database's URL without its secrets (driver, user, host, port, database, and the
    names of its query options): no password, whether in the user part or the query
    (`?password=`, `?sslpassword=`, which the driver takes as well), and no user part at all
    when the password was pasted in unencoded (an `@` in it split the URL elsewhere)."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return "MODEL_ROUTER_DATABASE_URL (not a database URL)"
    authority = url.split("://", 1)[-1].split("/", 1)[0]
    if authority.count("@") > 1:
        host = authority.rsplit("@", 1)[1]
        return f"{parsed.drivername}://***@{host}/{parsed.database or ''}"
    shown = parsed.set(query={k: _MASK for k in parsed.query})
    return shown.render_as_string(hide_password=True).replace(quote(_MASK, safe=""), _MASK)


def _secrets(url: str) -> set[str]:
    """Every form a secret of the URL may be quoted in: the password as parsed, percent-encoded
    and as written (up to the last `@`), and each query option's value."""
    found: set[str] = set()
    authority = url.split("://", 1)[-1].split("/", 1)[0]
    if "@" in authority:
        userinfo = authority.rsplit("@", 1)[0]
        if ":" in userinfo:
            raw = userinfo.split(":", 1)[1]
            found |= {raw, quote(raw, safe=""), quote_plus(raw)}
    try:
        parsed = make_url(url)
    except ArgumentError:
        return found
    # Split at an unencoded `@` of the password, the parsed one is only its start (`p` of
    # `p@ss`), and would mask every `p` of the message: the raw one above stands for it.
    if parsed.password and authority.count("@") == 1:
        password = str(parsed.password)
        found |= {password, quote(password, safe=""), quote_plus(password)}
    for value in parsed.query.values():
        found |= {value} if isinstance(value, str) else set(value)
    return {secret for secret in found if secret}


def _scrubbed(text: str, url: str) -> str:
    """The driver's words, one line, without the URL's secrets should they quote it."""
    said = " ".join(text.split())
    for secret in sorted(_secrets(url), key=len, reverse=True):
        said = said.replace(secret, _MASK)
    return said[:300]


def _cause(exc: DBAPIError) -> BaseException:
    return exc.orig if exc.orig is not None else exc


def _schema_missing(exc: DBAPIError) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if getattr(seen, "sqlstate", None) in _SCHEMA_MISSING:
            return True
        if any(words in str(seen) for words in _SQLITE_SCHEMA_MISSING):
            return True
        seen = getattr(seen, "orig", None) or seen.__cause__
    return False


def failure(exc: Exception, url: str) -> tuple[str, int] | None:
    """The message and exit status for a database failure, or None if exc is not one: exit 2
    for a database out of reach or a schema that is not there (the operator acts, then runs
    the command again), 1 for a statement the database refused."""
    db = where(url)
    if isinstance(exc, ArgumentError):
        return "MODEL_ROUTER_DATABASE_URL is not a database URL", 2
    if isinstance(exc, OSError):  # refused, unknown host, timed out: before any statement
        said = _scrubbed(str(exc), url)
        return f"cannot reach the database at {db}: {type(exc).__name__}: {said}", 2
    if not isinstance(exc, DBAPIError):
        return None
    cause = _cause(exc)
    said = _scrubbed(f"{type(cause).__name__}: {cause}", url)
    if _schema_missing(exc):
        return (
            f"the database at {db} lacks the tables this code needs (never migrated, or "
            f"migrated by older code): run `model-router db upgrade` ({said})",
            2,
        )
    if exc.statement is None or exc.connection_invalidated:
        # Failed while connecting (a wrong password, a database that does not exist) or the
        # connection was lost: nothing was asked of it.
        return f"cannot reach the database at {db}: {said}", 2
    return f"the database at {db} refused: {said}", 1


@contextmanager
def database_exit(url: str) -> Iterator[None]:
    """A database failure as its message on stderr and its exit status."""
    try:
        yield
    except SQLiteTooOld as exc:
        # The host's library, not the database: its message says what to run instead.
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    except (OSError, DBAPIError, ArgumentError) as exc:
        known = failure(exc, url)
        if known is None:
            raise
        message, status = known
        typer.echo(message, err=True)
        raise typer.Exit(status) from None


@contextmanager
def revision_exit(command: str) -> Iterator[None]:
    """Alembic's refusal of a revision (one this code does not have, a downgrade target above
    the current one) as its message and exit 2: the operator named it."""
    try:
        yield
    except CommandError as exc:
        typer.echo(f"{command}: {exc}", err=True)
        raise typer.Exit(2) from None
