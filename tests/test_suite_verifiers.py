"""Every verifier of the capability suite, with passing answers, failing answers and the
adversarial near misses a weak model produces."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from domain.suite.patching import PatchError, apply_patch, parse_patch, unified_diff
from domain.suite.reasons import UNLISTED, Failure, Verdict, Vocabulary, Why, fail, render
from domain.suite.sim.fs import FileSystem
from domain.suite.sim.shell import run
from domain.suite.types import SuiteAnswer, SuiteToolCall, function
from domain.suite.verifiers import (
    BulletCount,
    EndsWith,
    Exact,
    Forbidden,
    Includes,
    Lowercase,
    MaxWords,
    MinWords,
    NoCharacter,
    Pattern,
    Satisfies,
    SentenceCount,
    Unordered,
    Uppercase,
    check_answer,
    check_call,
    check_constraints,
    check_json_object,
    check_order,
    check_parallel_calls,
    check_patch,
    check_schema_output,
    check_simulated,
    check_tool_call,
    extract_patch,
    matches,
    plan_steps,
)
from domain.suite.verifiers.values import loads_strict

DELETE = function(
    "delete_file",
    "Delete a file.",
    {"path": {"type": "string"}, "dry_run": {"type": "boolean"}},
    required=("path",),
)
WEATHER = function(
    "get_weather",
    "Forecast.",
    {
        "city": {"type": "string"},
        "unit": {"type": "string", "enum": ["c", "f"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
)
TOOLS = [DELETE, WEATHER]


def answer(*calls: tuple[str, Any], text: str = "") -> SuiteAnswer:
    return SuiteAnswer(
        text=text,
        tool_calls=tuple(
            SuiteToolCall(id=f"c{i}", name=n, arguments=a if isinstance(a, str) else json.dumps(a))
            for i, (n, a) in enumerate(calls)
        ),
    )


def why(result: Failure | None) -> Why | None:
    return None if result is None else result.why


# --- values -------------------------------------------------------------------------------


def test_matches_is_lenient_on_case_and_numbers_but_strict_on_types() -> None:
    assert matches(" Lisbon ", "lisbon")
    assert matches(3.0, 3)
    assert not matches("3", 3)
    assert not matches(True, 1)
    assert not matches(1, True)
    assert matches(["bug", "auth"], Unordered(("auth", "bug")))
    assert not matches(["bug"], Unordered(("auth", "bug")))
    assert not matches(["bug", "bug"], Unordered(("auth", "bug")))
    assert matches("EUR", Exact("EUR")) and not matches("eur", Exact("EUR"))
    assert matches({"a": [1, 2]}, {"a": [1, 2]}) and not matches({"a": [2, 1]}, {"a": [1, 2]})
    assert not matches({"a": 1, "b": 2}, {"a": 1})
    assert matches("x", Satisfies(lambda v: v == "x"))
    assert not matches(None, Satisfies(lambda v: v.startswith("x")))


def test_loads_strict_rejects_everything_but_one_json_value() -> None:
    assert loads_strict(' {"a": 1} ') == (True, {"a": 1})
    for text in ("NaN", '{"a": Infinity}', '{"a": 1} trailing', "{'a': 1}", "", "[" * 100_000):
        assert loads_strict(text) == (False, None)


# --- tool calling ---------------------------------------------------------------------------


def test_tool_call_passes_with_the_right_function_and_arguments() -> None:
    good = answer(("delete_file", {"path": "build/old.log"}))
    assert check_tool_call(good, TOOLS, "delete_file", {"path": "build/old.log"}) is None
    with_text = answer(("delete_file", {"path": "build/old.log"}), text="Deleting it.")
    assert check_tool_call(with_text, TOOLS, "delete_file") is None


P = "build/old.log"


@pytest.mark.parametrize(
    ("calls", "expected", "names"),
    [
        ((), Why.NO_TOOL_CALL, ("delete_file",)),
        ((("get_weather", {"city": P, "unit": "c", "days": 1}),), Why.WRONG_TOOL, None),
        ((("rm_rf", {"path": P}),), Why.UNKNOWN_TOOL, ("rm_rf",)),
        ((("delete_file", '{"path": "build/old.log"'),), Why.ARGS_NOT_JSON, ("delete_file",)),
        ((("delete_file", f'["{P}"]'),), Why.ARGS_NOT_OBJECT, ("delete_file",)),
        (
            (("delete_file", {"path": P, "force": True}),),
            Why.EXTRA_ARGUMENT,
            ("force", "delete_file"),
        ),
        ((("delete_file", {"dry_run": True}),), Why.MISSING_ARGUMENT, ("path", "delete_file")),
        ((("delete_file", {"path": 7}),), Why.ARGUMENT_TYPE, ("path", "delete_file")),
        ((("delete_file", {"path": "other.log"}),), Why.ARGUMENT_VALUE, ("path", "delete_file")),
        ((("delete_file", {"path": P}), ("delete_file", {"path": P})), Why.CALL_COUNT, (2, 1)),
    ],
)
def test_tool_call_near_misses_fail(
    calls: tuple[tuple[str, Any], ...], expected: Why, names: tuple[Any, ...] | None
) -> None:
    result = check_tool_call(answer(*calls), TOOLS, "delete_file", {"path": P})
    assert result is not None and result.why == expected
    if names is not None:
        assert result.names == names


def test_tool_call_schema_near_misses_wrong_enum_and_bounds() -> None:
    for args in (
        {"city": "Oslo", "unit": "kelvin", "days": 2},
        {"city": "Oslo", "unit": "c", "days": 9},
    ):
        result = check_call(answer(("get_weather", args)).tool_calls[0], TOOLS)
        assert why(result) == Why.ARGUMENT_INVALID
    stringly = check_call(
        answer(("get_weather", {"city": "Oslo", "unit": "c", "days": "2"})).tool_calls[0], TOOLS
    )
    assert stringly == fail(Why.ARGUMENT_TYPE, "days", "get_weather")


def test_an_undeclared_argument_fails_even_when_the_schema_allows_extras() -> None:
    loose = function("ping", "Ping.", {"host": {"type": "string"}})
    loose.parameters.pop("additionalProperties")
    result = check_call(answer(("ping", {"host": "a", "count": 3})).tool_calls[0], [loose])
    assert result == fail(Why.EXTRA_ARGUMENT, "count", "ping")


def test_parallel_calls_pass_in_any_order() -> None:
    expected = [
        ("get_weather", {"city": "Oslo"}),
        ("get_weather", {"city": "Madrid"}),
    ]
    both = answer(
        ("get_weather", {"city": "madrid", "unit": "c", "days": 1}),
        ("get_weather", {"city": "Oslo", "unit": "c", "days": 1}),
    )
    assert check_parallel_calls(both, TOOLS, expected) is None


def test_parallel_near_misses_fail() -> None:
    expected = [("get_weather", {"city": "Oslo"}), ("get_weather", {"city": "Madrid"})]
    oslo = ("get_weather", {"city": "Oslo", "unit": "c", "days": 1})
    only_one = check_parallel_calls(answer(oslo), TOOLS, expected)
    assert only_one == fail(Why.CALL_COUNT, 1, 2)
    twice = check_parallel_calls(answer(oslo, oslo), TOOLS, expected)
    assert twice == fail(Why.DUPLICATE_CALL, "get_weather")
    wrong_city = check_parallel_calls(
        answer(oslo, ("get_weather", {"city": "Rome", "unit": "c", "days": 1})), TOOLS, expected
    )
    assert wrong_city == fail(Why.MISSING_CALL, "get_weather")
    invalid = check_parallel_calls(
        answer(oslo, ("get_weather", {"city": "Madrid", "unit": "c", "days": 1, "x": 1})),
        TOOLS,
        expected,
    )
    assert why(invalid) == Why.EXTRA_ARGUMENT


# --- JSON ------------------------------------------------------------------------------------


def test_json_object_passes_with_the_asked_shape() -> None:
    assert (
        check_json_object(
            '{"name": "Ada Lovelace", "age": 36}', {"name": "ada lovelace", "age": 36}
        )
        is None
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('```json\n{"name": "Ada", "age": 36}\n```', Why.NOT_JSON),
        ('Here it is: {"name": "Ada", "age": 36}', Why.NOT_JSON),
        ("{'name': 'Ada', 'age': 36}", Why.NOT_JSON),
        ('{"name": "Ada", "age": 36,}', Why.NOT_JSON),
        ('[{"name": "Ada", "age": 36}]', Why.NOT_OBJECT),
        ('{"name": "Ada"}', Why.MISSING_KEY),
        ('{"name": "Ada", "age": "36"}', Why.KEY_TYPE),
        ('{"name": "Ada", "age": 35}', Why.KEY_VALUE),
        ('{"name": "Ada", "age": 36, "born": 1815}', Why.EXTRA_KEY),
    ],
)
def test_json_object_near_misses_fail(text: str, expected: Why) -> None:
    assert why(check_json_object(text, {"name": "Ada", "age": 36})) == expected


SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "label": {"type": "string", "enum": ["bug", "question"]},
        "lines": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"qty": {"type": "integer", "minimum": 1}},
                "required": ["qty"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["label", "lines"],
    "additionalProperties": False,
}


def test_schema_output_passes_when_valid_with_the_expected_values() -> None:
    assert (
        check_schema_output('{"label": "bug", "lines": [{"qty": 2}]}', SCHEMA, {"label": "bug"})
        is None
    )


@pytest.mark.parametrize(
    ("value", "failure"),
    [
        ({"label": "Bug", "lines": []}, fail(Why.SCHEMA_VIOLATION, "label", "enum")),
        (
            {"label": "bug", "lines": [{"qty": "2"}]},
            fail(Why.SCHEMA_VIOLATION, "lines/0/qty", "type"),
        ),
        (
            {"label": "bug", "lines": [{"qty": 0}]},
            fail(Why.SCHEMA_VIOLATION, "lines/0/qty", "minimum"),
        ),
        ({"label": "bug"}, fail(Why.SCHEMA_VIOLATION, "root", "required")),
        (
            {"label": "bug", "lines": [], "note": "x"},
            fail(Why.SCHEMA_VIOLATION, "root", "additionalProperties"),
        ),
        ({"label": "question", "lines": []}, fail(Why.KEY_VALUE, "label")),
        (["bug"], fail(Why.SCHEMA_VIOLATION, "root", "type")),
    ],
)
def test_schema_output_near_misses_fail(value: Any, failure: Failure) -> None:
    assert check_schema_output(json.dumps(value), SCHEMA, {"label": "bug"}) == failure


def test_schema_output_rejects_text_that_is_not_json() -> None:
    assert why(check_schema_output("label: bug", SCHEMA)) == Why.NOT_JSON


# --- text constraints and short answers ------------------------------------------------------


def test_constraints_pass_and_fail() -> None:
    cases: list[tuple[Any, str, str]] = [
        (MaxWords("max", 5), "one two three", "one two three four five six"),
        (MinWords("min", 3), "one two three", "one two"),
        (Lowercase("lower"), "all lower here", "Not lower"),
        (Uppercase("upper"), "ALL UPPER, 42!", "ALMOST UPPEr"),
        (Uppercase("upper-body", skip_first_line=True), "<<Title>>\nBODY TEXT", "<<T>>\nBody"),
        (NoCharacter("no-commas", ","), "no commas here", "one, two"),
        (Forbidden("banned", ("fast",)), "quick and swift", "it is Faster now"),
        (Includes("has", ("Porto",)), "deliver to porto.", "deliver to Lisbon"),
        (BulletCount("three", 3), "- a\n- b\n* c", "- a\n- b\n- c\n- d"),
        (BulletCount("three", 3), "- a\n- b\n- c", "Here:\n- a\n- b\n- c"),
        (SentenceCount("two", 2), "One here. Two there.", "One. Two. Three."),
        (SentenceCount("two", 2), "One here. Two there", "Only one"),
        (EndsWith("end", "That is all."), "Text. That is all.  ", "That is all. More."),
        (Pattern("title", r"<<[^<>\n]+>>\n.+"), "<<T>>\nbody", "<T>\nbody"),
    ]
    for constraint, good, bad in cases:
        assert constraint.failure(good) is None, (constraint, good)
        assert constraint.failure(bad) is not None, (constraint, bad)


def test_forbidden_word_failure_names_the_word() -> None:
    found = check_constraints("this is fast", [Forbidden("banned", ("memory", "fast"))])
    assert found == fail(Why.FORBIDDEN_WORD, "fast")
    assert check_constraints("   ", [MaxWords("max", 3)]) == fail(Why.EMPTY)


def test_short_answers() -> None:
    assert check_answer(" `42`. ", "count", "42") is None
    assert check_answer("order=58213;  city=Porto", "o", "order=58213; city=porto") is None
    assert check_answer("412", "count", "42") == fail(Why.ANSWER_MISSING, "count")
    assert check_answer("42 lines", "count", "42") == fail(Why.ANSWER_MISSING, "count")
    assert check_answer("It has 42 lines", "count", "42", exact=False) is None
    assert check_answer("It has 420 lines", "count", "42", exact=False) is not None
    assert check_answer("8080", "port", "8443", distractors=["8080"]) == fail(
        Why.ANSWER_DISTRACTOR, "port"
    )
    assert check_answer("", "port", "8443") == fail(Why.EMPTY)


# --- plans -----------------------------------------------------------------------------------

PREREQUISITES = {"build": (), "test": ("build",), "deploy": ("test",)}


def test_ordered_plan_passes() -> None:
    steps = plan_steps('{"plan": ["Build", "test", "deploy"]}')
    assert steps == ["build", "test", "deploy"]
    assert check_order(steps, PREREQUISITES) is None


@pytest.mark.parametrize(
    ("steps", "failure"),
    [
        (["build", "deploy", "test"], fail(Why.STEP_ORDER, "deploy", "test")),
        (["build", "test"], fail(Why.MISSING_STEP, "deploy")),
        (["build", "build", "test", "deploy"], fail(Why.DUPLICATE_STEP, "build")),
        (["build", "test", "deploy", "party"], fail(Why.UNKNOWN_STEP, "party")),
    ],
)
def test_plan_near_misses_fail(steps: list[str], failure: Failure) -> None:
    assert check_order(steps, PREREQUISITES) == failure


def test_plan_text_must_be_a_json_plan() -> None:
    for text in ('["build"]', '{"steps": ["build"]}', '{"plan": []}', '{"plan": [1, 2]}'):
        result = plan_steps(text)
        assert isinstance(result, Failure)
    assert plan_steps("1. build") == fail(Why.NOT_JSON)


def test_simulated_plan() -> None:
    def apply(state: int, step: str) -> int | None:
        return state + 1 if step == "inc" else None

    assert check_simulated(["inc", "inc"], 0, apply, lambda s: s == 2, "two") is None
    assert check_simulated(["inc"], 0, apply, lambda s: s == 2, "two") == fail(
        Why.GOAL_NOT_REACHED, "two"
    )
    assert check_simulated(["inc", "dec"], 0, apply, lambda s: s == 2, "two") == fail(
        Why.ILLEGAL_STEP, 2
    )


# --- patches ---------------------------------------------------------------------------------

SOURCE = "a = 1\nb = 2\nc = 3\nd = 4\ne = 5\n"
TREE = {"pkg/values.py": SOURCE, "README.md": "hello\n"}
CHECKS = [("c-is-30", lambda tree: "c = 30\n" in tree["pkg/values.py"])]


def test_patch_that_applies_and_passes_its_check() -> None:
    patch = unified_diff("pkg/values.py", SOURCE, SOURCE.replace("c = 3", "c = 30"))
    assert check_patch(patch, TREE, CHECKS) is None
    fenced = f"Here is the fix:\n```diff\n{patch}```\nIt sets c."
    assert check_patch(fenced, TREE, CHECKS) is None


def test_patch_that_applies_but_fails_its_check() -> None:
    patch = unified_diff("pkg/values.py", SOURCE, SOURCE.replace("d = 4", "d = 30"))
    assert apply_patch(TREE, patch)["pkg/values.py"] != SOURCE
    assert check_patch(patch, TREE, CHECKS) == fail(Why.CHECK_FAILED, "c-is-30")


def test_patch_near_misses_that_do_not_apply() -> None:
    good = unified_diff("pkg/values.py", SOURCE, SOURCE.replace("c = 3", "c = 30"))
    stale = good.replace(" b = 2", " b = 20")
    assert check_patch(stale, TREE, CHECKS) == fail(Why.PATCH_CONTEXT, "pkg/values.py")
    elsewhere = good.replace("pkg/values.py", "pkg/other.py")
    assert check_patch(elsewhere, TREE, CHECKS) == fail(Why.PATCH_UNKNOWN_FILE, "pkg/other.py")
    assert check_patch("I changed c to 30.", TREE, CHECKS) == fail(Why.PATCH_EMPTY)
    headless = "--- a/pkg/values.py\n+++ b/pkg/values.py\n-c = 3\n+c = 30\n"
    assert check_patch(headless, TREE, CHECKS) == fail(Why.PATCH_MALFORMED)
    created = "--- /dev/null\n+++ b/README.md\n@@ -0,0 +1 @@\n+hi\n"
    assert check_patch(created, TREE, CHECKS) == fail(Why.PATCH_FILE_EXISTS, "README.md")


def test_patch_applier_recounts_offsets_and_edges() -> None:
    # Wrong header counts and line numbers, as models write them: recounted, found by offset.
    sloppy = "--- a/pkg/values.py\n+++ b/pkg/values.py\n@@ -1,9 +1,9 @@\n c = 3\n-d = 4\n+d = 40\n"
    assert apply_patch(TREE, sloppy)["pkg/values.py"] == SOURCE.replace("d = 4", "d = 40")
    # Two hunks, the second below the first.
    two = (
        "--- a/pkg/values.py\n+++ b/pkg/values.py\n@@ -1,2 +1,2 @@\n-a = 1\n+a = 10\n b = 2\n"
        "@@ -4,2 +4,2 @@\n d = 4\n-e = 5\n+e = 50\n"
    )
    assert apply_patch(TREE, two)["pkg/values.py"] == "a = 10\nb = 2\nc = 3\nd = 4\ne = 50\n"
    new_file = "--- /dev/null\n+++ b/docs/new.md\n@@ -0,0 +1,2 @@\n+# New\n+text\n"
    assert apply_patch(TREE, new_file)["docs/new.md"] == "# New\ntext\n"
    deleted = "--- a/README.md\n+++ /dev/null\n@@ -1 +0,0 @@\n-hello\n"
    assert "README.md" not in apply_patch(TREE, deleted)
    no_newline = (
        "--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-hello\n+bye\n"
        "\\ No newline at end of file\n"
    )
    assert apply_patch(TREE, no_newline)["README.md"] == "bye"
    assert apply_patch(TREE, "diff --git a/x b/x\nindex 1..2\n" + two) == apply_patch(TREE, two)
    # A patch applies as a whole or not at all.
    half = two + "--- a/missing.py\n+++ b/missing.py\n@@ -1 +1 @@\n-x\n+y\n"
    with pytest.raises(PatchError) as raised:
        apply_patch(TREE, half)
    assert raised.value.kind == "unknown-file"
    assert TREE["pkg/values.py"] == SOURCE


def test_patch_parser_ignores_surrounding_prose() -> None:
    patch = unified_diff("README.md", "hello\n", "hello world\n")
    assert len(parse_patch(f"Sure.\n\n{patch}\nThis updates the greeting.\n")) == 1
    assert extract_patch("no fence") == "no fence"


# --- the simulated shell ---------------------------------------------------------------------


def test_simulated_shell_runs_nothing_on_the_host() -> None:
    fs = FileSystem({"logs/app.log": "a\nb\nc\n", "src/x.py": "# TODO(security)\n"})
    assert run(fs, "wc -l logs/app.log") == "3 logs/app.log\n"
    assert run(fs, "cat logs/app.log | grep b") == "b\n"
    assert run(fs, 'grep -rl "TODO(security)" src') == "src/x.py\n"
    assert run(fs, "grep -c z logs/app.log") == "0\n[exit status 1]"
    assert run(fs, "mkdir -p out && cp logs/*.log out/ && ls out") == "app.log\n"
    assert run(fs, "rm -rf / ; ls").endswith("logs\nout\nsrc\n")
    assert run(fs, "curl http://example.com").endswith("[exit status 127]")
    assert run(fs, "cat ../../etc/passwd").endswith("[exit status 1]")
    assert run(fs, "echo hi > notes.txt && cat notes.txt") == "hi\n"


def test_simulated_shell_bounds_what_a_command_line_can_build() -> None:
    fs = FileSystem({"a": "x" * 1000})
    doubling = "; ".join(["cat a a > b; cat b b > a"] * 20)
    assert "File too large" in run(fs, doubling)
    assert max(len(text) for text in fs.files.values()) <= 65_536
    assert run(fs, "mkdir d && cp -r d d/e").startswith("cp: cannot cp 'd' into itself")
    assert run(fs, "echo " + "x " * 600) == "bash: command line too long\n[exit status 2]"


# --- reasons ---------------------------------------------------------------------------------


def test_vocabulary_shows_only_declared_names() -> None:
    vocabulary = Vocabulary(["delete_file", "path", "lines", "qty"])
    assert vocabulary.show("delete_file") == "'delete_file'"
    assert vocabulary.show("lines/0/qty") == "'lines/0/qty'"
    assert vocabulary.show("lines/secret/qty") == UNLISTED
    assert vocabulary.show("rm -rf /") == UNLISTED
    assert vocabulary.show(3) == "3"
    extra = render(fail(Why.EXTRA_ARGUMENT, "force", "delete_file"), vocabulary)
    assert extra.reason == f"extra argument {UNLISTED} in call to 'delete_file'"


def test_verdict_refuses_free_text() -> None:
    with pytest.raises(ValidationError):
        Verdict(passed=False, reason="the model said: my password is hunter2")
    with pytest.raises(ValidationError):
        Verdict(passed=False, reason="extra argument 'a b' in call to 'x'")
    with pytest.raises(ValidationError):
        Verdict(passed=True, reason="output is not valid JSON")
    assert Verdict(passed=False, reason="missing key 'age'").reason == "missing key 'age'"


def test_the_rerank_check_fails_a_reranker_that_ranks_wrongly() -> None:
    from domain.suite.rerank import RERANK_CASES, rerank_passed, verify_rerank

    first, top_n, _ = RERANK_CASES
    assert verify_rerank(first, [(1, 0.9), (0, 0.5), (2, 0.1)]).passed
    assert not verify_rerank(first, [(0, 0.9), (1, 0.5), (2, 0.1)]).passed  # wrong first
    assert not verify_rerank(first, [(1, 0.2), (0, 0.5), (2, 0.1)]).passed  # unordered
    assert not verify_rerank(first, [(1, 0.9), (1, 0.5), (2, 0.1)]).passed  # index twice
    assert not verify_rerank(top_n, [(0, 0.9), (2, 0.5), (1, 0.1)]).passed  # ignores top_n
    results = [verify_rerank(first, [(1, 0.9), (0, 0.5), (2, 0.1)])]
    assert not rerank_passed(results)  # a case without a result counts as failed
