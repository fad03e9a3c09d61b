"""Why a case passed or failed, in a form that cannot carry a model's output.

Suite results are stored; prompts and outputs must never be. So a reason is one of the fixed
templates below, filled only with small integers and with names the case itself declared (its
tool, argument, field, path, step and constraint names: its `Vocabulary`). A name the model
made up is shown as `<unlisted>`, and `Verdict` refuses any reason that is not a rendered
template, so free text cannot get in even by mistake.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

UNLISTED = "<unlisted>"
_NAME = re.compile(r"[A-Za-z0-9_./-]{1,80}")
_DIGITS = re.compile(r"[0-9]{1,6}")


class Why(StrEnum):
    OK = "ok"
    # Answers in general.
    TRUNCATED = "answer cut at the token limit"
    FILTERED = "answer stopped by a content filter"
    EMPTY = "empty answer"
    TURN_LIMIT = "no final answer within {0} turns"
    NO_ANSWER = "the provider returned no answer"
    JUDGE_ERROR = "the case could not judge the answer"
    FEATURE_REFUSED = "the provider refused the request's {0}"
    # Tool calls.
    NO_TOOL_CALL = "no tool call, expected a call to {0}"
    UNEXPECTED_TOOL_CALL = "unexpected tool call to {0}"
    UNKNOWN_TOOL = "called {0}, which is not offered"
    WRONG_TOOL = "called {0} instead of {1}"
    CALL_COUNT = "tool calls in the turn: {0}, expected {1}"
    ARGS_NOT_JSON = "arguments of {0} are not valid JSON"
    ARGS_NOT_OBJECT = "arguments of {0} are not a JSON object"
    EXTRA_ARGUMENT = "extra argument {0} in call to {1}"
    MISSING_ARGUMENT = "missing argument {0} in call to {1}"
    ARGUMENT_TYPE = "argument {0} of {1} has the wrong type"
    ARGUMENT_INVALID = "argument {0} of {1} violates its schema"
    ARGUMENT_VALUE = "argument {0} of {1} has the wrong value"
    MISSING_CALL = "no call to {0} with the expected arguments"
    DUPLICATE_CALL = "duplicate call to {0}"
    REPEATED_FAILED_CALL = "repeated a call to {0} that had failed permanently"
    # JSON output.
    NOT_JSON = "output is not valid JSON"
    NOT_OBJECT = "output is JSON but not an object"
    MISSING_KEY = "missing key {0}"
    EXTRA_KEY = "unexpected key {0}"
    KEY_TYPE = "key {0} has the wrong type"
    KEY_VALUE = "key {0} has the wrong value"
    SCHEMA_VIOLATION = "output violates the schema at {0} ({1})"
    # Text.
    CONSTRAINT = "constraint {0} violated"
    FORBIDDEN_WORD = "forbidden word {0} used"
    ANSWER_MISSING = "answer lacks the expected {0}"
    ANSWER_DISTRACTOR = "answer gives the distractor for {0}"
    # Patches and files.
    PATCH_EMPTY = "no patch in the answer"
    PATCH_MALFORMED = "patch does not parse"
    PATCH_UNKNOWN_FILE = "patch touches {0}, which does not exist"
    PATCH_FILE_EXISTS = "patch creates {0}, which already exists"
    PATCH_CONTEXT = "patch does not apply to {0}"
    CHECK_FAILED = "check {0} failed"
    FILE_CONTENT = "file {0} does not have the expected content"
    # Plans and goals.
    PLAN_MISSING = "no plan in the answer"
    UNKNOWN_STEP = "unknown step {0}"
    DUPLICATE_STEP = "step {0} appears twice"
    MISSING_STEP = "step {0} is missing"
    STEP_ORDER = "step {0} comes before its prerequisite {1}"
    ILLEGAL_STEP = "step {0} is not allowed in the state it is taken"
    GOAL_NOT_REACHED = "goal {0} not reached"

    @property
    def arity(self) -> int:
        return self.value.count("{")


@dataclass(frozen=True)
class Failure:
    """What a verifier found, before it is shown: a template and the raw names for it."""

    why: Why
    names: tuple[str | int, ...] = ()

    def __post_init__(self) -> None:
        if len(self.names) != self.why.arity:
            raise ValueError(f"{self.why.name} takes {self.why.arity} names")


def fail(why: Why, *names: str | int) -> Failure:
    return Failure(why, names)


class Vocabulary:
    """The names a case may show in its reasons: everything it declared itself."""

    __slots__ = ("_names",)

    def __init__(self, names: Iterable[str] = ()) -> None:
        self._names = frozenset(n for n in names if _NAME.fullmatch(n))

    @property
    def names(self) -> frozenset[str]:
        return self._names

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def __or__(self, other: Vocabulary | Iterable[str]) -> Vocabulary:
        extra = other._names if isinstance(other, Vocabulary) else frozenset(other)
        return Vocabulary(self._names | extra)

    def show(self, name: str | int) -> str:
        if isinstance(name, int) and not isinstance(name, bool):
            return str(name) if abs(name) < 10**9 else UNLISTED
        text = str(name)
        if text in self._names:
            return f"'{text}'"
        # A JSON path or nested argument: shown when every part is declared or an index.
        parts = text.split("/")
        if (
            len(parts) > 1
            and _NAME.fullmatch(text)
            and all(p in self._names or _DIGITS.fullmatch(p) for p in parts)
        ):
            return f"'{text}'"
        return UNLISTED

    @classmethod
    def of_schema(cls, schema: Any) -> Vocabulary:
        return cls(_schema_names(schema))


def _schema_names(schema: Any) -> Iterable[str]:
    """Property and definition names in a JSON schema (not values: enum members are data)."""
    if isinstance(schema, Mapping):
        for key in ("properties", "$defs", "definitions", "patternProperties"):
            sub = schema.get(key)
            if isinstance(sub, Mapping):
                for name, child in sub.items():
                    yield str(name)
                    yield from _schema_names(child)
        for key in ("items", "additionalProperties", "not", "if", "then", "else"):
            if key in schema:
                yield from _schema_names(schema[key])
        for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
            for child in schema.get(key) or ():
                yield from _schema_names(child)


_SHOWN = rf"(?:'{_NAME.pattern}'|{re.escape(UNLISTED)}|-?[0-9]{{1,9}})"


def _template_pattern(template: str) -> str:
    pieces = re.split(r"\{\d\}", template)
    return _SHOWN.join(re.escape(p) for p in pieces)


@cache
def _reason_pattern() -> re.Pattern[str]:
    # Compiled on first use: importing the suite (workflow sandboxes do) stays cheap.
    return re.compile("|".join(f"(?:{_template_pattern(w.value)})" for w in Why))


def is_rendered_reason(reason: str) -> bool:
    return _reason_pattern().fullmatch(reason) is not None


class Verdict(BaseModel):
    """A case's final judgement. `reason` is "ok" or a rendered failure template."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    passed: bool
    reason: str

    @model_validator(mode="after")
    def _reason_is_a_template(self) -> Verdict:
        if not is_rendered_reason(self.reason):
            raise ValueError("a verdict reason must be a rendered template")
        if self.passed != (self.reason == Why.OK.value):
            raise ValueError("a verdict passes exactly when its reason is 'ok'")
        return self


PASSED = Verdict(passed=True, reason=Why.OK.value)


def render(failure: Failure | None, vocabulary: Vocabulary) -> Verdict:
    if failure is None:
        return PASSED
    shown = [vocabulary.show(n) for n in failure.names]
    return Verdict(passed=False, reason=failure.why.value.format(*shown))
