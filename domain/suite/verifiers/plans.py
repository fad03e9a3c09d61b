"""Plan verifiers: a plan is a JSON object {"plan": [step, ...]}. Either every step is one of
a known set, each exactly once, after all its prerequisites; or the steps are actions that a
small pure simulator takes one by one, each legal in the state it is taken, until the goal."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from domain.suite.reasons import Failure, Why, fail
from domain.suite.verifiers.json_output import json_object

State = TypeVar("State")


def plan_steps(text: str) -> list[str] | Failure:
    value = json_object(text)
    if isinstance(value, Failure):
        return value
    steps = value.get("plan")
    if not isinstance(steps, list) or not steps or not all(isinstance(s, str) for s in steps):
        return fail(Why.PLAN_MISSING)
    return [" ".join(s.split()).casefold() for s in steps]


def check_order(steps: Sequence[str], prerequisites: Mapping[str, Sequence[str]]) -> Failure | None:
    """`prerequisites` names every step (those without any map to ()); ids are lower case."""
    position: dict[str, int] = {}
    for index, step in enumerate(steps):
        if step not in prerequisites:
            return fail(Why.UNKNOWN_STEP, step)
        if step in position:
            return fail(Why.DUPLICATE_STEP, step)
        position[step] = index
    for step in prerequisites:
        if step not in position:
            return fail(Why.MISSING_STEP, step)
    for step in steps:
        for before in prerequisites[step]:
            if position[before] > position[step]:
                return fail(Why.STEP_ORDER, step, before)
    return None


def check_simulated(
    steps: Sequence[str],
    initial: State,
    apply: Callable[[State, str], State | None],
    goal: Callable[[State], bool],
    goal_name: str,
) -> Failure | None:
    """`apply` returns the next state, or None when the step is malformed or illegal then."""
    state = initial
    for number, step in enumerate(steps, start=1):
        following = apply(state, step)
        if following is None:
            return fail(Why.ILLEGAL_STEP, number)
        state = following
    return None if goal(state) else fail(Why.GOAL_NOT_REACHED, goal_name)


def check_plan_text(
    text: str,
    judge: Callable[[list[str]], Failure | None],
) -> Failure | None:
    steps = plan_steps(text)
    if isinstance(steps, Failure):
        return steps
    return judge(steps)


def plan_text(steps: Sequence[str]) -> str:
    value: dict[str, Any] = {"plan": list(steps)}
    return json.dumps(value)
