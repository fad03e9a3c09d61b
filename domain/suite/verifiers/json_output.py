"""JSON-output verifiers: text that is exactly one JSON object under JSON mode, with the
expected keys and values; and output that validates against a strict structured-output
schema (jsonschema, draft 2020-12) and carries the expected values."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from jsonschema import Draft202012Validator

from domain.suite.reasons import Failure, Why, fail
from domain.suite.verifiers.values import loads_strict, matches


def json_object(text: str) -> dict[str, Any] | Failure:
    """No code fence, no preamble: JSON mode promises the whole output is the JSON value."""
    ok, value = loads_strict(text)
    if not ok:
        return fail(Why.NOT_JSON)
    if not isinstance(value, dict):
        return fail(Why.NOT_OBJECT)
    return value


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__


def check_json_object(
    text: str, expected: Mapping[str, Any], *, extra_keys: bool = False
) -> Failure | None:
    value = json_object(text)
    if isinstance(value, Failure):
        return value
    for key, want in expected.items():
        if key not in value:
            return fail(Why.MISSING_KEY, key)
        got = value[key]
        if not matches(got, want):
            same_kind = _kind(got) == _kind(want) or not isinstance(
                want, bool | int | float | str | list | dict
            )
            return fail(Why.KEY_VALUE if same_kind else Why.KEY_TYPE, key)
    if not extra_keys:
        for key in sorted(value):
            if key not in expected:
                return fail(Why.EXTRA_KEY, key)
    return None


def _path(parts: Sequence[Any]) -> str:
    return "/".join(str(p) for p in parts) or "root"


def schema_errors(value: Any, schema: Mapping[str, Any]) -> Failure | None:
    errors = sorted(
        Draft202012Validator(schema).iter_errors(value),
        key=lambda e: (len(e.absolute_path), [str(p) for p in e.absolute_path], e.validator),
    )
    if not errors:
        return None
    error = errors[0]
    return fail(Why.SCHEMA_VIOLATION, _path(error.absolute_path), str(error.validator))


def check_schema_output(
    text: str, schema: Mapping[str, Any], expected: Mapping[str, Any] | None = None
) -> Failure | None:
    """Parses, validates against `schema`, then compares each top-level field in `expected`."""
    ok, value = loads_strict(text)
    if not ok:
        return fail(Why.NOT_JSON)
    broken = schema_errors(value, schema)
    if broken is not None:
        return broken
    if not isinstance(value, dict):
        return fail(Why.NOT_OBJECT)
    for key, want in (expected or {}).items():
        if key not in value:
            return fail(Why.MISSING_KEY, key)
        if not matches(value[key], want):
            return fail(Why.KEY_VALUE, key)
    return None
