"""The JSON schemas Anthropic checks, as the simulator's Messages endpoint checks them
(providers/upstream/anthropic_api.py): `output_config.format`'s schema and a strict tool's
`input_schema`, both held to the subset its structured outputs take. A gateway that sends a
schema outside it meets here the 400 it meets at Anthropic, after its call was claimed."""

from __future__ import annotations

import re
from typing import Any

from providers.upstream.chat import BadRequest

# What Anthropic's structured outputs refuse in a schema, as its documented limits say (and its
# 400 does), in `output_config.format` and in a strict tool's `input_schema` alike (strict tool
# use is the same grammar-constrained sampling): an object not closed by
# `additionalProperties: false`, numerical bounds, string lengths, array constraints but
# `minItems` 0 or 1, a pattern with lookaround, a backreference or a word boundary, a recursive
# schema. One list for both, so the two cannot drift apart.
_NOT_TAKEN = (
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "maxItems",
    "uniqueItems",
    "contains",
)
_COMPLEX_PATTERN = re.compile(r"\(\?<?[=!]|\\[1-9bBk]")


def _resolve(root: dict[str, Any], ref: str) -> object:
    """What `ref` points at in `root`, None for nothing (a JSON pointer's `~1` is `/`)."""
    node: object = root
    for part in ref.removeprefix("#").strip("/").split("/") if ref != "#" else []:
        key = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, list):  # an anyOf's branch, by its index
            node = node[int(key)] if key.isdigit() and int(key) < len(node) else None
        else:
            node = node.get(key) if isinstance(node, dict) else None
    return node


def _check_schema(root: object, at: str) -> None:
    """`root` refused as Anthropic refuses a schema outside its subset, named from `at`."""

    def walk(node: object, path: str, refs: tuple[str, ...]) -> None:
        if not isinstance(node, dict):
            return
        ref = node.get("$ref")
        if isinstance(ref, str):
            if ref == "#" or ref in refs:
                raise BadRequest(f"{path}: recursive schemas are not supported")
            target = _resolve(root if isinstance(root, dict) else {}, ref)
            if not isinstance(target, dict):
                # A ref to nothing (`#/definitions/A` once `definitions` is gone) was taken,
                # and a schema the gateway sent with one passed here.
                raise BadRequest(f"{path}: Invalid schema: $ref '{ref}' does not resolve")
            walk(target, path, (*refs, ref))
        kind = node.get("type")
        if (kind == "object" or "properties" in node) and node.get(
            "additionalProperties"
        ) is not False:
            raise BadRequest(
                f"{path}: For 'object' type, 'additionalProperties' must be explicitly set to false"
            )
        for key in _NOT_TAKEN:
            if key in node:
                raise BadRequest(f"{path}: For '{kind}' type, property '{key}' is not supported")
        if "minItems" in node and node["minItems"] not in (0, 1):
            raise BadRequest(
                f"{path}: For 'array' type, 'minItems' values other than 0 or 1 are not supported"
            )
        pattern = node.get("pattern")
        if isinstance(pattern, str) and _COMPLEX_PATTERN.search(pattern):
            raise BadRequest(f"{path}: the regular expression of 'pattern' is not supported")
        for key in ("properties", "$defs", "definitions"):
            for name, sub in (node.get(key) or {}).items():
                walk(sub, f"{path}.{key}.{name}", refs)
        for key in ("anyOf", "allOf", "oneOf"):
            for i, sub in enumerate(node.get(key) or []):
                walk(sub, f"{path}.{key}.{i}", refs)
        walk(node.get("items"), f"{path}.items", refs)

    walk(root, at, ())


def check_schemas(body: dict[str, Any]) -> None:
    """A request body's format schema and strict tools' schemas, refused as Anthropic refuses
    them. A tool that is not strict takes any schema, as at Anthropic."""
    fmt = (body.get("output_config") or {}).get("format") or {}
    if fmt.get("type") == "json_schema" and fmt.get("schema") is not None:
        _check_schema(fmt["schema"], "output_config.format.schema")
    for i, tool in enumerate(body.get("tools") or []):
        if isinstance(tool, dict) and tool.get("strict") is True:
            _check_schema(tool.get("input_schema"), f"tools.{i}.custom.input_schema")
