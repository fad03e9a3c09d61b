"""The README's endpoint table names each route the API serves, with its method, and no route it
does not: a platform team wires its agents from that table, so a GET that was never built
(`/factory/webhook-subscriptions/{id}` once) or a route left out must fail here."""

from __future__ import annotations

import re
from pathlib import Path

from api.app import create_app
from core.settings import Settings

README = Path(__file__).resolve().parents[1] / "README.md"
METHOD = r"(?:GET|POST|PUT|DELETE)"
# A backticked piece, a parenthesis of methods only ("(POST, GET)", for the path before it), or
# a method word (for the paths after it in the same cell).
PIECE = re.compile(rf"`([^`]+)`|\(({METHOD}(?:, {METHOD})*)\)|\b({METHOD})\b")


def served() -> set[tuple[str, str]]:
    app = create_app(Settings(auth_jwt_secret="s" * 32))
    return {(m.upper(), p) for p, ops in app.openapi()["paths"].items() for m in ops}


def _full(path: str, last: str, known: set[str]) -> str:
    """`…/x` after `/a/b` is `/a/b/x` or, where that is no route, `/a/x`."""
    if not path.startswith("…"):
        return path
    appended, sibling = last + path[1:], last.rsplit("/", 1)[0] + path[1:]
    return sibling if appended not in known and sibling in known else appended


def _paths(piece: str, last: str, known: set[str]) -> list[str]:
    """A backticked path without its query; `/a[/{id}]` is both `/a` and `/a/{id}`."""
    path = _full(re.split(r"\[?\?", piece)[0], last, known)
    optional = re.fullmatch(r"(.*?)\[(/[^\]]+)\]", path)
    return [optional[1], optional[1] + optional[2]] if optional else [path]


def documented(text: str, known: set[str]) -> set[tuple[str, str]]:
    """(method, path) for every route the README's endpoint table names."""
    table = text.split("| Method | Path | Scope | Roles |", 1)[1].split("\n\n", 1)[0]
    found: set[tuple[str, str]] = set()
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        methods = [m.strip() for m in cells[0].split(",")]
        last, previous = "", ""
        for match in PIECE.finditer(cells[1]):
            piece, override, word = match.groups()
            if override and previous:
                found -= {(m, previous) for m in methods}
                found |= {(m, previous) for m in override.split(", ")}
            elif word:
                methods = [word]
            elif piece and piece[0] in "/…" and not piece.startswith("/console"):
                paths = _paths(piece, last, known)
                found |= {(m, path) for m in methods for path in paths}
                last = previous = paths[0]
            else:
                previous = ""
    return found


def test_the_endpoint_table_is_the_routes_the_api_serves() -> None:
    routes = served()
    table = documented(README.read_text(), {p for _, p in routes})
    assert table - routes == set(), f"README names routes the API lacks: {sorted(table - routes)}"
    assert routes - table == set(), f"routes missing from the README: {sorted(routes - table)}"


def test_the_old_webhook_row_is_caught() -> None:
    """The check itself: the README's old webhook row promised a GET on one subscription and a
    DELETE on the collection, which the API never served."""
    old = "| POST, GET, DELETE | `/factory/webhook-subscriptions[/{subscriptionId}]` | a | b |"
    text = f"| Method | Path | Scope | Roles |\n| --- | --- | --- | --- |\n{old}\n\n"
    routes = served()
    wrong = documented(text, {p for _, p in routes}) - routes
    assert wrong == {
        ("DELETE", "/factory/webhook-subscriptions"),
        ("GET", "/factory/webhook-subscriptions/{subscriptionId}"),
        ("POST", "/factory/webhook-subscriptions/{subscriptionId}"),
    }
