"""Builds a JSON value that satisfies a JSON schema, for default tool arguments and structured
output. Covers what tool and response schemas use in practice (objects, arrays, scalars, enum,
const, $ref, anyOf/oneOf/allOf, numeric and length bounds); `pattern` is not solved."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_MAX_DEPTH = 12
_FORMATS = {
    "date": "2024-01-01",
    "date-time": "2024-01-01T00:00:00Z",
    "time": "00:00:00",
    "email": "user@example.com",
    "uri": "https://example.com/",
    "url": "https://example.com/",
    "uuid": "00000000-0000-4000-8000-000000000000",
    "ipv4": "192.0.2.1",
    "hostname": "example.com",
}


def instance_for(schema: dict[str, Any] | bool, root: dict[str, Any] | None = None) -> Any:
    base = schema if isinstance(schema, dict) else {}
    return _fill(schema, root if root is not None else base, 0)


def _resolve(ref: str, root: dict[str, Any]) -> dict[str, Any]:
    node: Any = root
    for part in ref.removeprefix("#/").split("/") if ref != "#" else []:
        if not isinstance(node, dict):
            return {}
        node = node.get(part.replace("~1", "/").replace("~0", "~"), {})
    return node if isinstance(node, dict) else {}


def _fill(schema: dict[str, Any] | bool, root: dict[str, Any], depth: int) -> Any:
    if not isinstance(schema, dict) or depth > _MAX_DEPTH:
        return None
    if "$ref" in schema:
        return _fill(_resolve(schema["$ref"], root), root, depth + 1)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    if "default" in schema:
        return schema["default"]
    for key in ("anyOf", "oneOf"):
        options = [o for o in schema.get(key, []) if not (isinstance(o, dict) and _null_only(o))]
        if options:
            return _fill(options[0], root, depth + 1)
    if schema.get("allOf"):
        merged: dict[str, Any] = {}
        for part in schema["allOf"]:
            value = _fill(part, root, depth + 1)
            if isinstance(value, dict):
                merged.update(value)
        return merged
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None:
        kind = "object" if "properties" in schema else "string"
    fill = _BY_TYPE.get(kind)
    return fill(schema, root, depth) if fill is not None else None


def _null_only(schema: dict[str, Any]) -> bool:
    return schema.get("type") == "null"


def _object(schema: dict[str, Any], root: dict[str, Any], depth: int) -> dict[str, Any]:
    return {
        name: _fill(sub, root, depth + 1) for name, sub in (schema.get("properties") or {}).items()
    }


def _array(schema: dict[str, Any], root: dict[str, Any], depth: int) -> list[Any]:
    prefix = schema.get("prefixItems") or []
    count = max(int(schema.get("minItems", 1)), len(prefix))
    if "maxItems" in schema:
        count = min(count, int(schema["maxItems"]))
    items = schema.get("items", {})
    return [_fill(prefix[i] if i < len(prefix) else items, root, depth + 1) for i in range(count)]


def _string(schema: dict[str, Any], root: dict[str, Any], depth: int) -> str:
    value = _FORMATS.get(str(schema.get("format")), "example")
    low, high = int(schema.get("minLength", 0)), schema.get("maxLength")
    if len(value) < low:
        value = value + "x" * (low - len(value))
    return value[: int(high)] if high is not None else value


def _number(schema: dict[str, Any], root: dict[str, Any], depth: int) -> float:
    value = 1.0
    if "minimum" in schema:
        value = float(schema["minimum"])
    elif "exclusiveMinimum" in schema:
        value = float(schema["exclusiveMinimum"]) + 1
    if "maximum" in schema:
        value = min(value, float(schema["maximum"]))
    elif "exclusiveMaximum" in schema:
        value = min(value, float(schema["exclusiveMaximum"]) - 1)
    return value


def _integer(schema: dict[str, Any], root: dict[str, Any], depth: int) -> int:
    return int(_number(schema, root, depth))


_Filler = Callable[[dict[str, Any], dict[str, Any], int], Any]
_BY_TYPE: dict[str, _Filler] = {
    "object": _object,
    "array": _array,
    "string": _string,
    "number": _number,
    "integer": _integer,
    "boolean": lambda s, r, d: True,
    "null": lambda s, r, d: None,
}
