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
The hooks run per float and per constant only, which chat bodies hold few of."""

from __future__ import annotations

import json
import math
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
    path = _path_to(parsed)
    return ".".join(["body", *(str(p)[:_SEGMENT_CHARS] for p in path or ())])


def _path_to(value: Any) -> list[str | int] | None:
    """The keys and indexes down to the first non-finite number (depth-first, in body order).
    Recursive: the body's depth was bounded before (MODEL_ROUTER_MAX_JSON_DEPTH)."""
    if value is _FOUND:
        return []
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        below = _path_to(item)
        if below is not None:
            return [key, *below]
    return None
