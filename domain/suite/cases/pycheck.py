"""Checks over Python source that never execute it: the source is parsed with `ast`, and a
few arithmetic expressions are evaluated by a tiny interpreter that knows only integers,
+ - * //, range, sum and len (anything else is "cannot tell", which fails the check)."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from typing import Any

_LIMIT = 10**6


class Unknown(Exception):
    """The expression uses something the interpreter does not know."""


def parse(source: str) -> ast.Module:
    return ast.parse(source)


def function(source: str, name: str) -> ast.FunctionDef | None:
    for node in parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    return None


def returned_expression(node: ast.FunctionDef) -> ast.expr | None:
    """The expression of a function that is (docstring and) a single return statement."""
    body = list(node.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    if len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value is not None:
        return body[0].value
    return None


def evaluate(node: ast.expr, env: Mapping[str, int]) -> Any:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Name) and node.id in env:
        return env[node.id]
    if isinstance(node, ast.BinOp):
        left, right = evaluate(node.left, env), evaluate(node.right, env)
        if not isinstance(left, int) or not isinstance(right, int):
            raise Unknown
        if isinstance(node.op, ast.Add):
            value = left + right
        elif isinstance(node.op, ast.Sub):
            value = left - right
        elif isinstance(node.op, ast.Mult):
            value = left * right
        elif isinstance(node.op, ast.FloorDiv) and right != 0:
            value = left // right
        else:
            raise Unknown
        if abs(value) > _LIMIT:
            raise Unknown
        return value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        args = [evaluate(a, env) for a in node.args]
        if (
            node.func.id == "range"
            and 1 <= len(args) <= 3
            and all(isinstance(a, int) for a in args)
        ):
            span = range(*args)
            if len(span) > _LIMIT:
                raise Unknown
            return span
        if node.func.id in ("sum", "len") and len(args) == 1 and isinstance(args[0], range):
            return sum(args[0]) if node.func.id == "sum" else len(args[0])
    raise Unknown


def identifiers(source: str) -> Iterator[str]:
    """Every name the module defines, imports, reads or accesses as an attribute."""
    for node in ast.walk(parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield node.name
        elif isinstance(node, ast.Name):
            yield node.id
        elif isinstance(node, ast.alias):
            yield node.asname or node.name
            yield node.name
        elif isinstance(node, ast.Attribute):
            yield node.attr


def calls(source: str) -> Iterator[str]:
    for node in ast.walk(parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            yield node.func.id


def same_function(before: str, after: str, name: str) -> bool:
    old, new = function(before, name), function(after, name)
    return old is not None and new is not None and ast.dump(old) == ast.dump(new)
