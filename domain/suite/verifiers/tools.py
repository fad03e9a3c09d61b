"""Tool-call verifiers: the right function, arguments that parse, validate against the tool's
JSON schema and carry the expected values; and parallel turns of independent calls."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from jsonschema import Draft202012Validator

from domain.suite.reasons import Failure, Why, fail
from domain.suite.types import SuiteAnswer, SuiteTool, SuiteToolCall
from domain.suite.verifiers.values import canonical, loads_strict, matches

ExpectedCall = tuple[str, Mapping[str, Any]]


def call_arguments(call: SuiteToolCall) -> dict[str, Any] | Failure:
    ok, value = loads_strict(call.arguments)
    if not ok:
        return fail(Why.ARGS_NOT_JSON, call.name)
    if not isinstance(value, dict):
        return fail(Why.ARGS_NOT_OBJECT, call.name)
    return value


def _path(parts: Sequence[Any]) -> str:
    return "/".join(str(p) for p in parts)


def schema_failure(arguments: dict[str, Any], tool: SuiteTool) -> Failure | None:
    """The first way `arguments` break `tool`'s schema, undeclared arguments first: an argument
    the tool does not declare is never right, whatever additionalProperties says."""
    schema = tool.parameters
    declared = schema.get("properties") or {}
    for name in sorted(arguments):
        if name not in declared:
            return fail(Why.EXTRA_ARGUMENT, name, tool.name)
    for name in schema.get("required") or ():
        if name not in arguments:
            return fail(Why.MISSING_ARGUMENT, name, tool.name)
    errors = sorted(
        Draft202012Validator(schema).iter_errors(arguments),
        key=lambda e: (len(e.absolute_path), [str(p) for p in e.absolute_path], e.validator),
    )
    if not errors:
        return None
    error = errors[0]
    where = _path(error.absolute_path) or "arguments"
    if error.validator == "type":
        return fail(Why.ARGUMENT_TYPE, where, tool.name)
    return fail(Why.ARGUMENT_INVALID, where, tool.name)


def check_call(
    call: SuiteToolCall,
    tools: Sequence[SuiteTool],
    expected: Mapping[str, Any] | None = None,
) -> Failure | None:
    """One call against the offered tools: known tool, JSON object arguments valid against its
    schema, and (when given) the expected value of each named argument."""
    tool = next((t for t in tools if t.name == call.name), None)
    if tool is None:
        return fail(Why.UNKNOWN_TOOL, call.name)
    arguments = call_arguments(call)
    if isinstance(arguments, Failure):
        return arguments
    broken = schema_failure(arguments, tool)
    if broken is not None:
        return broken
    for name, want in (expected or {}).items():
        if name not in arguments or not matches(arguments[name], want):
            return fail(Why.ARGUMENT_VALUE, name, tool.name)
    return None


def check_tool_call(
    answer: SuiteAnswer,
    tools: Sequence[SuiteTool],
    name: str,
    expected: Mapping[str, Any] | None = None,
) -> Failure | None:
    """Exactly one call, to `name`, with valid arguments holding the expected values."""
    if not answer.tool_calls:
        return fail(Why.NO_TOOL_CALL, name)
    if len(answer.tool_calls) > 1:
        return fail(Why.CALL_COUNT, len(answer.tool_calls), 1)
    call = answer.tool_calls[0]
    if call.name != name:
        if any(t.name == call.name for t in tools):
            return fail(Why.WRONG_TOOL, call.name, name)
        return fail(Why.UNKNOWN_TOOL, call.name)
    return check_call(call, tools, expected)


def check_parallel_calls(
    answer: SuiteAnswer,
    tools: Sequence[SuiteTool],
    expected: Sequence[ExpectedCall],
) -> Failure | None:
    """All the expected independent calls in this one turn, in any order, and nothing else."""
    calls = answer.tool_calls
    if len(calls) != len(expected):
        return fail(Why.CALL_COUNT, len(calls), len(expected))
    seen: set[tuple[str, str]] = set()
    for call in calls:
        broken = check_call(call, tools)
        if broken is not None:
            return broken
        key = (call.name, canonical(call_arguments(call)))
        if key in seen:
            return fail(Why.DUPLICATE_CALL, call.name)
        seen.add(key)
    remaining = list(range(len(calls)))
    for name, want in expected:
        hit = next((i for i in remaining if calls[i].name == name and _holds(calls[i], want)), None)
        if hit is None:
            return fail(Why.MISSING_CALL, name)
        remaining.remove(hit)
    return None


def _holds(call: SuiteToolCall, want: Mapping[str, Any]) -> bool:
    arguments = call_arguments(call)
    return isinstance(arguments, dict) and all(
        k in arguments and matches(arguments[k], v) for k, v in want.items()
    )
