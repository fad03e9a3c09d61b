"""Deterministic verifiers: each takes a model's answer (and what the case expected) and
returns None when it is right, or a `Failure` naming what is wrong. No model grades another."""

from domain.suite.verifiers.json_output import check_json_object, check_schema_output, json_object
from domain.suite.verifiers.patches import check_patch, extract_patch, run_checks
from domain.suite.verifiers.plans import check_order, check_plan_text, check_simulated, plan_steps
from domain.suite.verifiers.text import (
    BulletCount,
    Constraint,
    EndsWith,
    Forbidden,
    Includes,
    Lowercase,
    MaxWords,
    MinWords,
    NoCharacter,
    Pattern,
    SentenceCount,
    Uppercase,
    check_answer,
    check_constraints,
)
from domain.suite.verifiers.tools import (
    check_call,
    check_parallel_calls,
    check_tool_call,
    schema_failure,
)
from domain.suite.verifiers.values import Exact, Satisfies, Unordered, matches

__all__ = [
    "BulletCount",
    "Constraint",
    "EndsWith",
    "Exact",
    "Forbidden",
    "Includes",
    "Lowercase",
    "MaxWords",
    "MinWords",
    "NoCharacter",
    "Pattern",
    "Satisfies",
    "SentenceCount",
    "Unordered",
    "Uppercase",
    "check_answer",
    "check_call",
    "check_constraints",
    "check_json_object",
    "check_order",
    "check_parallel_calls",
    "check_patch",
    "check_plan_text",
    "check_schema_output",
    "check_simulated",
    "check_tool_call",
    "extract_patch",
    "json_object",
    "matches",
    "plan_steps",
    "run_checks",
    "schema_failure",
]
