"""Numbers a JSON body may not carry on: NaN, Infinity, -Infinity, and a number too large for
a float (1e400, which Python's json reads as inf). Python's json parser takes them all, but no
provider SDK sends them ("Out of range float values are not JSON compliant"), so a body holding
one in a tool's parameters or a response format's schema was claimed, then failed at the
provider call as a cut stream: retried, fallen back from, and a breaker strike on a healthy
deployment. The edge (api/limits.py) refuses it with a 400 naming where it is, before any
route runs, for every surface alike.

The body is parsed once more to find one (its route parses it again): a regex that screened
for one first (the constants' names, a long exponent, a 100-digit run) cost 28 ms on a 740 kB
prompt, where the parse costs 0.7 ms; a body of 20,000 messages (1.9 MB) parses in ~7 ms,
beside FastAPI's own parse and validation of it (measured 2026-12, CPython 3.11).
The hooks run per float and per constant only, which chat bodies hold few of.

A value parsed elsewhere can hold one too: a provider's tool-call arguments are the model's own
text, and jiter reads `1e400` as inf even with `allow_inf_nan=False` (api/anthropic_answers.py
asks `holds_non_finite`)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

# A field name is the caller's own text: each segment of the path it is told is cut to this.
_SEGMENT_CHARS = 64


class _NonFinite:
    """Where a non-finite number stood in the parsed body."""


_FOUND = _NonFinite()


def non_finite_field(body: bytes) -> str | None:
    """The field (`body.tools.0.function.parameters.…`) of the first non-finite number in a JSON
    body; None when it holds none, or is not JSON at all (its route refuses that itself)."""
    found = False

    def constant(_name: str) -> Any:
        nonlocal found
        found = True
        return _FOUND

    def number(text: str) -> Any:
        nonlocal found
        value = float(text)
        if math.isfinite(value):
            return value
        found = True
        return _FOUND

    try:
        parsed = json.loads(body, parse_constant=constant, parse_float=number)
    except (ValueError, RecursionError):
        return None
    if not found:
        return None
    path = _path_to(parsed, lambda item: item is _FOUND)
    return ".".join(["body", *(str(p)[:_SEGMENT_CHARS] for p in path or ())])


def holds_non_finite(value: Any) -> bool:
    """Whether an already parsed JSON value (dicts, lists, scalars) holds a float that is NaN or
    infinite anywhere in it."""
    return _path_to(value, _non_finite_float) is not None


def _non_finite_float(item: Any) -> bool:
    return isinstance(item, float) and not math.isfinite(item)


def _path_to(value: Any, found: Callable[[Any], bool]) -> list[str | int] | None:
    """The keys and indexes down to the first item `found` says is non-finite (depth-first, in
    body order). Recursive: a body's depth was bounded before (MODEL_ROUTER_MAX_JSON_DEPTH), and
    jiter refuses a value nested deeper than its own limit (200)."""
    if found(value):
        return []
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        below = _path_to(item, found)
        if below is not None:
            return [key, *below]
    return None
