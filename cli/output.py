"""What the CLI prints: tables that never cut a value, `--json` documents, and messages on
stderr, never wrapped when piped.

Without a terminal (a pipe, a file, `$(…)`) rich laid tables out for 80 columns and cut what
did not fit with "…": an invocation id came out as `f0a…`, a cost lost its last digits, and a
script reading the table read those. A terminal keeps its own width, and a value wider than its
column folds onto the next line rather than being cut. Messages on stderr are laid out the
same way: piped, an error was hard-wrapped at 80 columns mid-sentence ("Request URL has an" /
"unsupported protocol"), and a script grepping for it missed it.

Every console the CLI prints through is made here, with emoji codes left as the text they are:
a deployment id may hold colons, and `team:smile:prod` was printed as "team😄prod"."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

# The width given to output that is not a terminal: wider than any row, so a table takes its
# natural width (one line per row) and a message is never wrapped. A table does not expand to
# the width, so nothing is padded to it.
_UNBOUNDED = 1_000_000

JSON_HELP = "Print the API's JSON (one document) instead of a table, for scripts"


def console(*, stderr: bool = False) -> Console:
    """A console on stdout (or stderr) as it is now (the command's, not the one at import): on
    a terminal, its width; otherwise unbounded. Never reads `:name:` as an emoji."""
    made = Console(stderr=stderr, emoji=False)
    if made.is_terminal:
        return made
    return Console(stderr=stderr, emoji=False, width=_UNBOUNDED, height=25)


def stdout() -> Console:
    """A console on stdout as it is now."""
    return console()


class _Stderr:
    """The CLI's stderr (`err.print(…)`): a console made for each message, as stdout's is. A
    console's width is fixed when it is made, and one made at import could not know whether the
    stderr of the command it prints for is a terminal (tests run many commands in one process,
    each with a stderr of its own)."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        console(stderr=True).print(*objects, **kwargs)


err = _Stderr()


def table(title: str | None, columns: Iterable[str], **kwargs: Any) -> Table:
    """A table whose every cell folds rather than being cut with "…": ids, deployment ids and
    money are read, and copied, whole."""
    t = Table(title=title, **kwargs)
    for column in columns:
        t.add_column(column, overflow="fold")
    return t


def print_table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    """The rows as a table, every value shown as the text it is (never read as markup)."""
    t = table(title, columns)
    for row in rows:
        t.add_row(*("" if v is None else escape(str(v)) for v in row))
    stdout().print(t)


def print_json(document: Any) -> None:
    """One JSON document on stdout, as the API sent it (not through rich: no wrapping, no
    markup, no colour)."""
    typer.echo(json.dumps(document, indent=2))
