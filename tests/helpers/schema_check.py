"""A small JSON-schema conformance check for the schemas the tests use (objects, arrays,
scalars, enum, required, additionalProperties), so tests need no validator dependency."""

from __future__ import annotations

from typing import Any

_TYPES: dict[str, Any] = {
    "object": dict,
    "array": list,
    "string": str,
    "integer": int,
    "number": (int, float),
    "boolean": bool,
    "null": type(None),
}


def violations(value: Any, schema: dict[str, Any], path: str = "$") -> list[str]:
    problems: list[str] = []
    kind = schema.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        ok = any(
            isinstance(value, _TYPES[k])
            and not (k in ("integer", "number") and isinstance(value, bool))
            for k in kinds
        )
        if not ok:
            return [f"{path}: expected {kind}, got {type(value).__name__}"]
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{path}: not in enum")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        problems += [f"{path}: missing {r}" for r in schema.get("required", []) if r not in value]
        if schema.get("additionalProperties") is False:
            problems += [f"{path}: extra {k}" for k in value if k not in props]
        for key, sub in props.items():
            if key in value:
                problems += violations(value[key], sub, f"{path}.{key}")
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        if len(value) < schema.get("minItems", 0):
            problems.append(f"{path}: too few items")
        for i, item in enumerate(value):
            problems += violations(item, schema["items"], f"{path}[{i}]")
    return problems
