"""Comparing a model's values with expected ones, leniently where people would be lenient
(string case and surrounding space, 3 vs 3.0) and strictly elsewhere (types, list order)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Unordered:
    """A list whose order does not matter."""

    items: tuple[Any, ...]


@dataclass(frozen=True)
class Satisfies:
    """A value a predicate accepts, for answers with more than one right form."""

    predicate: Callable[[Any], bool]


@dataclass(frozen=True)
class Exact:
    """A string compared exactly: codes, versions, identifiers."""

    text: str


def norm(text: str) -> str:
    return " ".join(text.split()).casefold()


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def matches(got: Any, want: Any) -> bool:
    if isinstance(want, Satisfies):
        try:
            return bool(want.predicate(got))
        except (TypeError, ValueError, AttributeError):
            return False
    if isinstance(want, Exact):
        return isinstance(got, str) and got == want.text
    if isinstance(want, Unordered):
        if not isinstance(got, list) or len(got) != len(want.items):
            return False
        remaining = list(want.items)
        for item in got:
            hit = next((i for i, w in enumerate(remaining) if matches(item, w)), None)
            if hit is None:
                return False
            remaining.pop(hit)
        return True
    if isinstance(want, bool) or want is None:
        return got is want
    if _is_number(want):
        return _is_number(got) and got == want
    if isinstance(want, str):
        return isinstance(got, str) and norm(got) == norm(want)
    if isinstance(want, list | tuple):
        return (
            isinstance(got, list)
            and len(got) == len(want)
            and all(matches(g, w) for g, w in zip(got, want, strict=True))
        )
    if isinstance(want, Mapping):
        return (
            isinstance(got, dict)
            and set(got) == set(want)
            and all(matches(got[k], w) for k, w in want.items())
        )
    return False


def plain(value: Any) -> Any:
    """An expected value as the JSON a competent model would write (for reference answers)."""
    if isinstance(value, Exact):
        return value.text
    if isinstance(value, Unordered):
        return [plain(v) for v in value.items]
    if isinstance(value, Satisfies):
        raise TypeError("a predicate has no plain form; give the reference value explicitly")
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def loads_strict(text: str) -> tuple[bool, Any]:
    """(True, value) when `text` is exactly one JSON value (surrounding space allowed), without
    NaN or Infinity; (False, None) otherwise, whatever the input (deep nesting included)."""

    def reject(constant: str) -> Any:
        raise ValueError("non-finite number")

    try:
        return True, json.loads(text, parse_constant=reject)
    except (ValueError, RecursionError):
        return False, None


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
