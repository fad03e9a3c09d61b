"""The FILE a catalog command sends (`deployments register`, `profiles publish`): YAML or JSON,
read as the API takes it and refused before any request (exit 2, naming the file and the
problem) unless it is a mapping JSON can carry."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import typer
import yaml
from rich.markup import escape

from cli.http import err


class _Loader(yaml.SafeLoader):
    """YAML as the API takes it: an unquoted `2025-06-01` (a profile's version, a release id,
    a price's date) stays the text it was. YAML 1.1 reads it as a date, which JSON cannot carry:
    the CLI ended in a traceback (TypeError) instead of sending it."""


_Loader.yaml_implicit_resolvers = {
    first: [r for r in resolvers if r[0] != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def load_file(file: Path) -> dict[str, Any]:
    """The file's mapping, refused (exit 2, naming the file and the problem) unless it is what
    JSON can carry: it is sent as JSON, and a non-UTF-8 file, `.nan`, `!!binary`, `!!set` or a
    key that is not text ended in a traceback (or, for `.nan`, a body the API cannot read)."""
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        err.print(
            f"[red]Cannot read {escape(str(file))}: not UTF-8 text (byte {exc.start} is "
            f"{exc.object[exc.start : exc.start + 1]!r})[/red]"
        )
        raise typer.Exit(2) from None
    except OSError as exc:
        err.print(f"[red]Cannot read {escape(str(file))}: {escape(str(exc))}[/red]")
        raise typer.Exit(2) from None
    try:
        document = yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as exc:
        err.print(f"[red]Cannot read {escape(str(file))}: {escape(str(exc))}[/red]")
        raise typer.Exit(2) from None
    except RecursionError:
        err.print(f"[red]Cannot read {escape(str(file))}: nested too deeply[/red]")
        raise typer.Exit(2) from None
    if document is None:
        problem: str | None = "empty"
    elif not isinstance(document, dict):
        problem = "not a mapping of fields (a YAML mapping or a JSON object)"
    else:
        problem = _not_json(document, "", set())
    if problem:
        err.print(f"[red]Cannot send {escape(str(file))}: {escape(problem)}[/red]")
        raise typer.Exit(2)
    return document


def _not_json(value: Any, at: str, open_: set[int]) -> str | None:
    """What keeps value (at its path in the file) from being strict JSON, or None: only text
    keys, finite numbers and JSON's types. `open_` holds the collections being checked, as an
    alias (`&a [*a]`) can make one contain itself."""
    where = at or "the top level"
    if value is None or isinstance(value, bool | int | str):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{where}: {value} is not a JSON number"
    if not isinstance(value, dict | list):
        if isinstance(value, bytes):
            kind = "binary data (!!binary)"
        elif isinstance(value, set):
            kind = "a set (!!set)"
        else:
            kind = f"a {type(value).__name__}"
        return f"{where}: {kind} has no JSON form"
    if id(value) in open_:
        return f"{where}: contains itself (a YAML alias)"
    open_.add(id(value))
    try:
        if isinstance(value, list):
            items = [(f"{at}[{i}]", v) for i, v in enumerate(value)]
        else:
            for key in value:
                if not isinstance(key, str):
                    return f"{where}: key {key!r} is not text (JSON keys are strings: quote it)"
            items = [(f"{at}.{k}" if at else k, v) for k, v in value.items()]
        for path, item in items:
            problem = _not_json(item, path, open_)
            if problem:
                return problem
        return None
    finally:
        open_.discard(id(value))
