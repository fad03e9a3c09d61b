"""planning: an ordered plan, as JSON {"plan": [...]}, whose steps are verified: either
ordering known steps under prerequisites, or actions a pure simulator takes one by one."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from domain.enums import Capability
from domain.suite.cases.base import Case, SingleTurnCase, say, text_only
from domain.suite.reasons import Failure
from domain.suite.types import SuiteRequest, SuiteResponseFormat, user
from domain.suite.verifiers.plans import check_order, check_plan_text, check_simulated, plan_text

SYSTEM = "You are a meticulous planner. You answer with a JSON object only."
_FORMAT = (
    '\n\nAnswer with a JSON object of the form {"plan": [step, step, ...]}, steps in the order '
    "they are carried out, each written exactly as above."
)

Blocks = dict[str, str]  # block -> what it rests on ("table" or a block)
Jugs = tuple[int, int]  # litres in the 3-litre and the 5-litre jug
_MOVE = re.compile(r"move ([abc]) onto (?:the )?(table|[abc])")
_JUG = re.compile(r"(fill|empty) ([35])|pour ([35]) into ([35])")


def _case(
    slug: str,
    prompt: str,
    judge: Callable[[list[str]], Failure | None],
    reference: Sequence[str],
    near: Sequence[str],
    names: Sequence[str],
) -> Case:
    request = SuiteRequest(
        system=SYSTEM,
        messages=(user(prompt + _FORMAT),),
        response_format=SuiteResponseFormat(type="json_object"),
    )
    return SingleTurnCase(
        f"planning/{slug}",
        Capability.PLANNING,
        request,
        text_only(lambda text: check_plan_text(text, judge)),
        say(plan_text(reference)),
        say(plan_text(near)),
        names,
    )


def _ordering(
    slug: str,
    intro: str,
    prerequisites: Mapping[str, Sequence[str]],
    reference: Sequence[str],
    near: Sequence[str],
) -> Case:
    rules = "\n".join(
        f"- {step} must come after {', '.join(before)}"
        for step, before in prerequisites.items()
        if before
    )
    steps = ", ".join(sorted(prerequisites))
    prompt = f"{intro}\nSteps (unordered): {steps}.\nRules:\n{rules}\nUse every step exactly once."
    return _case(
        slug,
        prompt,
        lambda plan: check_order(plan, prerequisites),
        reference,
        near,
        list(prerequisites),
    )


def _blocks_apply(state: Blocks, step: str) -> Blocks | None:
    found = _MOVE.fullmatch(step)
    if found is None:
        return None
    block, target = found.group(1), found.group(2)
    covered = set(state.values())
    if block == target or block in covered or (target != "table" and target in covered):
        return None
    if state[block] == target:
        return None
    return {**state, block: target}


def _jugs_apply(state: Jugs, step: str) -> Jugs | None:
    found = _JUG.fullmatch(step)
    if found is None:
        return None
    size = {"3": 0, "5": 1}
    capacity = (3, 5)
    levels = list(state)
    if found.group(1):
        jug = size[found.group(2)]
        levels[jug] = capacity[jug] if found.group(1) == "fill" else 0
        return (levels[0], levels[1])
    source, target = size[found.group(3)], size[found.group(4)]
    if source == target:
        return None
    moved = min(levels[source], capacity[target] - levels[target])
    levels[source] -= moved
    levels[target] += moved
    return (levels[0], levels[1])


def planning_cases() -> list[Case]:
    release = {
        "build": (),
        "run-tests": ("build",),
        "backup-db": (),
        "migrate-db": ("backup-db",),
        "deploy": ("run-tests", "migrate-db"),
        "smoke-test": ("deploy",),
        "announce": ("smoke-test",),
    }
    release_plan = [
        "build",
        "run-tests",
        "backup-db",
        "migrate-db",
        "deploy",
        "smoke-test",
        "announce",
    ]
    migration = {
        "freeze-writes": (),
        "snapshot": ("freeze-writes",),
        "copy-data": ("snapshot",),
        "verify-counts": ("copy-data",),
        "switch-reads": ("verify-counts",),
        "switch-writes": ("switch-reads",),
        "unfreeze-writes": ("switch-writes",),
    }
    migration_plan = list(migration)
    blocks: Blocks = {"a": "table", "b": "table", "c": "a"}
    jugs = ["fill 5", "pour 5 into 3", "empty 3", "pour 5 into 3", "fill 5", "pour 5 into 3"]
    return [
        _ordering(
            "release",
            "Plan the release of a web service.",
            release,
            release_plan,
            ["build", "run-tests", "migrate-db", "backup-db", "deploy", "smoke-test", "announce"],
        ),
        _ordering(
            "database-migration",
            "Plan moving a live database to a new cluster.",
            migration,
            migration_plan,
            [s for s in migration_plan if s != "verify-counts"],
        ),
        _case(
            "blocks",
            "Blocks world. Now: block C is on block A; blocks A and B are on the table. Goal: A "
            "on B, B on C, C on the table. One action moves one block with nothing on it onto "
            'the table or onto another block with nothing on it, written as "move X onto Y" '
            '(for example "move c onto table", "move a onto b"), block names in lower case.',
            lambda plan: check_simulated(
                plan,
                blocks,
                _blocks_apply,
                lambda s: s == {"a": "b", "b": "c", "c": "table"},
                "tower-a-b-c",
            ),
            ["move c onto table", "move b onto c", "move a onto b"],
            ["move a onto b", "move c onto table", "move b onto c"],
            ["tower-a-b-c"],
        ),
        _case(
            "water-jugs",
            "You have an empty 3-litre jug and an empty 5-litre jug and a tap. Goal: exactly 4 "
            'litres in the 5-litre jug. Actions: "fill 3", "fill 5", "empty 3", "empty 5", '
            '"pour 3 into 5", "pour 5 into 3" (pouring stops when the source is empty or the '
            "target is full). Use as few actions as you can.",
            lambda plan: check_simulated(
                plan, (0, 0), _jugs_apply, lambda s: s[1] == 4, "four-litres"
            ),
            jugs,
            jugs[:-1],
            ["four-litres"],
        ),
    ]
