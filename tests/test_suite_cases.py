"""The suite as a whole: coverage, the oracle passes every case, every near miss fails it,
the scripted responders fail exactly the chosen capabilities, scoring, the long-context
sizing, stable ids, and reasons that can never carry a model's output."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import ValidationError

from domain.enums import Capability
from domain.suite import (
    Case,
    CaseResult,
    Oracle,
    Suite,
    SuiteAnswer,
    SuiteRequest,
    SuiteToolCall,
    Verdict,
    Why,
    run_case,
)
from domain.suite.cases.context import CHARS_PER_TOKEN, ContextCase
from domain.suite.patching import unified_diff
from domain.suite.reasons import is_rendered_reason
from providers.upstream.suite_responders import competent_responder, failing_responder
from providers.upstream.turn import ChatTurn, Reply, ToolCallReply, ToolSpec, TurnMessage

SUITE = Suite()
ORACLE = Oracle(SUITE)
CASE_IDS = [c.case_id for c in SUITE.cases]
MARKER = "PLANTED_MARKER_7f3a9c"

STABLE_IDS = [
    "tool-calling/weather-forecast",
    "tool-calling/delete-file",
    "tool-calling/create-ticket",
    "tool-calling/convert-currency",
    "parallel-tool-calling/weather-two-cities",
    "parallel-tool-calling/read-three-files",
    "parallel-tool-calling/profile-and-orders",
    "parallel-tool-calling/three-time-zones",
    "strict-json/extract-person",
    "strict-json/first-primes",
    "strict-json/service-config",
    "strict-json/escaped-quote",
    "json-schema/invoice",
    "json-schema/meeting",
    "json-schema/triage",
    "json-schema/contact-card",
    "instruction-following/lowercase-ocean",
    "instruction-following/three-bullets",
    "instruction-following/forbidden-words",
    "instruction-following/title-and-capitals",
    "multi-turn/order-update",
    "multi-turn/running-total",
    "multi-turn/capitals-rule",
    "multi-turn/renamed-services",
    "reliable-context/depth-10",
    "reliable-context/depth-50",
    "reliable-context/depth-90",
    "reliable-context/three-depths",
    "patch-success/off-by-one",
    "patch-success/config-timeout",
    "patch-success/rename-function",
    "patch-success/zero-guard",
    "file-editing/bump-version",
    "file-editing/fix-typos",
    "file-editing/add-import",
    "file-editing/remove-debug",
    "shell-tool-usage/count-lines",
    "shell-tool-usage/find-marker",
    "shell-tool-usage/archive-reports",
    "shell-tool-usage/config-port",
    "planning/release",
    "planning/database-migration",
    "planning/blocks",
    "planning/water-jugs",
    "error-recovery/transient-retry",
    "error-recovery/wrong-path",
    "error-recovery/room-taken",
    "error-recovery/expired-token",
    "agent-task-success/ship-paid-orders",
    "agent-task-success/schedule-meeting",
    "agent-task-success/refund-duplicate",
    "agent-task-success/rotate-key",
]


# --- a ChatTurn loop without HTTP, to run the simulator's responders in process -----------


def to_turn(request: SuiteRequest) -> ChatTurn:
    choice = request.tool_choice
    fmt = request.response_format
    return ChatTurn(
        api="openai",
        model="m",
        system=request.system,
        messages=[
            TurnMessage(
                role=m.role,
                text=m.content or "",
                tool_calls=[
                    ToolCallReply(id=c.id, name=c.name, arguments=c.arguments) for c in m.tool_calls
                ],
                tool_call_id=m.tool_call_id,
            )
            for m in request.messages
        ],
        tools=[
            ToolSpec(name=t.name, description=t.description, parameters=t.parameters)
            for t in request.tools
        ],
        tool_choice=choice.mode if choice else ("auto" if request.tools else "none"),
        tool_name=choice.name if choice else None,
        parallel_tool_calls=request.parallel_tool_calls is not False,
        response_format=fmt.type if fmt else "text",
        json_schema=fmt.json_schema if fmt else None,
        max_tokens=request.max_tokens,
    )


def from_reply(reply: Reply, turn: int) -> SuiteAnswer:
    calls = tuple(
        SuiteToolCall(
            id=c.id or f"sim_{turn}_{i}",
            name=c.name,
            arguments=c.arguments if isinstance(c.arguments, str) else json.dumps(c.arguments),
        )
        for i, c in enumerate(reply.tool_calls)
    )
    return SuiteAnswer(
        text=reply.text, tool_calls=calls, finish_reason="tool_calls" if calls else "stop"
    )


def via(responder: Callable[[ChatTurn], Any]) -> Callable[[SuiteRequest], SuiteAnswer]:
    return lambda request: from_reply(responder(to_turn(request)), request.assistant_turns)


def evaluate(ask: Callable[[SuiteRequest], SuiteAnswer], suite: Suite = SUITE) -> list[CaseResult]:
    return [run_case(case, ask) for case in suite.cases]


# --- coverage and identity -------------------------------------------------------------------


def test_suite_covers_all_13_capabilities_with_at_least_3_cases_each() -> None:
    assert len(Capability) == 13
    for capability in Capability:
        assert len(SUITE.cases_for(capability)) >= 3, capability
    assert len(SUITE.cases) <= 60
    assert SUITE.suite_version == "2026.12.1"


def test_case_ids_are_stable_and_unique() -> None:
    assert CASE_IDS == STABLE_IDS
    assert len(set(CASE_IDS)) == len(CASE_IDS)
    assert [c.case_id for c in Suite(max_context_tokens=4096).cases] == STABLE_IDS


def test_cases_are_deterministic() -> None:
    again = Suite()
    for one, two in zip(SUITE.cases, again.cases, strict=True):
        assert one.start() == two.start()


def test_the_suite_imports_nothing_but_pure_code() -> None:
    probe = (
        "import sys, domain.suite; "
        "bad = [m for m in sys.modules if m.split('.')[0] in "
        "('temporalio', 'fastapi', 'sqlalchemy', 'sqlmodel', 'providers', 'openai', 'httpx', "
        "'anthropic', 'store', 'activities', 'workflows', 'api')]; print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- the oracle and the near misses ---------------------------------------------------------


@pytest.mark.parametrize("case_id", CASE_IDS)
def test_the_oracle_passes_every_case(case_id: str) -> None:
    result = run_case(SUITE.case(case_id), ORACLE.answer)
    assert (result.passed, result.reason) == (True, "ok")


@pytest.mark.parametrize("case_id", CASE_IDS)
def test_every_near_miss_fails_its_case(case_id: str) -> None:
    result = run_case(SUITE.case(case_id), ORACLE.near_miss)
    assert not result.passed
    assert is_rendered_reason(result.reason)
    assert "<unlisted>" not in result.reason  # a near miss is explained in the case's names


def test_the_oracle_recognises_requests_mid_conversation() -> None:
    case = SUITE.case("error-recovery/wrong-path")
    request = case.start()
    for _ in range(3):
        assert ORACLE.case_for(request) is case
        step = case.step(request, ORACLE.answer(request))
        assert isinstance(step, SuiteRequest)
        request = step
    assert ORACLE.answer(request).text == "64"
    stranger = SuiteRequest(messages=(request.messages[0].model_copy(update={"content": "hi"}),))
    assert ORACLE.case_for(stranger) is None


def test_competent_responder_passes_everything() -> None:
    scores = SUITE.score(evaluate(via(competent_responder(SUITE))))
    assert all(score == (1.0, "pass") for score in scores.values())


@pytest.mark.parametrize("capability", list(Capability))
def test_failing_responder_fails_exactly_the_chosen_capability(capability: Capability) -> None:
    results = evaluate(via(failing_responder(SUITE, {capability})))
    for result in results:
        assert result.passed == (result.capability != capability), result
    scores = SUITE.score(results)
    assert scores[capability] == (0.0, "fail")
    assert all(s == (1.0, "pass") for c, s in scores.items() if c != capability)


def test_non_suite_requests_get_the_default_answer() -> None:
    turn = ChatTurn(api="openai", model="m", messages=[TurnMessage(role="user", text="hello")])
    assert competent_responder(SUITE)(turn) == Reply(text="Echo: hello")


# --- bounded turns and robustness ------------------------------------------------------------


def test_a_model_that_never_finishes_hits_the_turn_limit() -> None:
    case = SUITE.case("file-editing/bump-version")
    first = case.reference(case.start())  # read_file, again and again
    result = run_case(case, lambda request: first)
    assert (result.passed, result.reason) == (
        False,
        f"no final answer within {case.max_turns} turns",
    )


def test_a_flood_of_tool_calls_is_not_run() -> None:
    case = SUITE.case("shell-tool-usage/count-lines")
    call = SuiteToolCall(id="x", name="run_shell", arguments='{"command": "ls"}')
    step = case.step(case.start(), SuiteAnswer(tool_calls=(call,) * 17))
    assert step == Verdict(passed=False, reason="tool calls in the turn: 17, expected 16")


GARBAGE_TEXTS = [
    "",
    "null",
    "{}",
    "[]",
    '{"plan": null}',
    '{"plan": ["move a onto a"]}',
    "```\n```",
    "--- a\n+++ b\n@@ -1 +1 @@\n",
    "--- /dev/null\n+++ /dev/null\n@@ -0,0 +1 @@\n+x\n",
    "\x00\ud7ff",
    "9" * 5000,
    "[" * 50_000,
    "[" * 900 + "]" * 900,
    '{"plan": ' + "[" * 900 + "]" * 900 + "}",
]
DEEP = "[" * 900 + "]" * 900
GARBAGE_ARGUMENTS = [
    "",
    "null",
    "[]",
    "{",
    '{"path": null}',
    '{"command": 5}',
    "[" * 50_000,
    f'{{"path": {DEEP}, "command": {DEEP}, "status": {DEEP}}}',
]


@pytest.mark.parametrize("case_id", CASE_IDS)
def test_garbage_answers_fail_without_breaking_the_judge(case_id: str) -> None:
    case = SUITE.case(case_id)
    request = case.start()
    tool_names = [t.name for t in request.tools] or ["nothing"]
    answers = [SuiteAnswer(text=t) for t in GARBAGE_TEXTS]
    answers += [
        SuiteAnswer(tool_calls=(SuiteToolCall(id="x", name=name, arguments=args),))
        for name in tool_names
        for args in GARBAGE_ARGUMENTS
    ]
    answers += [SuiteAnswer(text="42", finish_reason=f) for f in ("length", "content_filter")]
    for answer in answers:
        step = case.step(request, answer)  # raises if a check has a defect
        if isinstance(step, Verdict):
            assert not step.passed and step.reason != Why.JUDGE_ERROR.value


# --- no content in results -------------------------------------------------------------------


def _planted(case: Case, request: SuiteRequest, how: str) -> SuiteAnswer:
    """Answers carrying the marker in every place a verifier looks at."""
    reference = case.reference(request)
    tools = [t.name for t in request.tools]
    if how == "text":
        return SuiteAnswer(text=MARKER)
    if how == "json":
        return SuiteAnswer(text=json.dumps({MARKER: MARKER, "plan": [MARKER]}))
    if how == "patch":
        return SuiteAnswer(text=unified_diff(f"{MARKER}/x.py", f"{MARKER}\n", "y\n"))
    if how == "tool-name":
        return SuiteAnswer(tool_calls=(SuiteToolCall(id=MARKER, name=MARKER, arguments="{}"),))
    if how == "argument-name" and tools:
        args = json.dumps({MARKER: MARKER})
        return SuiteAnswer(tool_calls=(SuiteToolCall(id="a", name=tools[0], arguments=args),))
    if how == "argument-values":
        calls = tuple(
            c.model_copy(
                update={"arguments": json.dumps({k: MARKER for k in json.loads(c.arguments)})}
            )
            for c in reference.tool_calls
        )
        return reference.model_copy(update={"tool_calls": calls, "text": reference.text + MARKER})
    if how == "extra-field":
        calls = tuple(
            c.model_copy(update={"arguments": json.dumps({**json.loads(c.arguments), MARKER: 1})})
            for c in reference.tool_calls
        )
        try:
            value = json.loads(reference.text)
        except ValueError:
            value = None
        text = json.dumps({**value, MARKER: 1}) if isinstance(value, dict) else reference.text
        return reference.model_copy(update={"tool_calls": calls, "text": text})
    return SuiteAnswer(text=MARKER)


PLANTINGS = [
    "text",
    "json",
    "patch",
    "tool-name",
    "argument-name",
    "argument-values",
    "extra-field",
]


@pytest.mark.parametrize("case_id", CASE_IDS)
def test_reasons_never_contain_text_planted_in_the_answer(case_id: str) -> None:
    case = SUITE.case(case_id)
    for how in PLANTINGS:
        for from_turn in range(case.max_turns):

            def ask(
                request: SuiteRequest, how: str = how, from_turn: int = from_turn
            ) -> SuiteAnswer:
                if request.assistant_turns < from_turn:
                    return ORACLE.answer(request)
                return _planted(case, request, how)

            result = run_case(case, ask)
            assert MARKER not in result.reason, (how, from_turn, result.reason)
            assert MARKER.lower() not in result.reason.lower()
            assert is_rendered_reason(result.reason)


def test_results_refuse_free_text_reasons() -> None:
    with pytest.raises(ValidationError):
        CaseResult(
            case_id="tool-calling/delete-file",
            capability=Capability.TOOL_CALLING,
            passed=False,
            reason=f"the model answered {MARKER}",
        )


# --- scoring ---------------------------------------------------------------------------------


def _results(passed: Callable[[Case], bool]) -> list[CaseResult]:
    return [
        SUITE.result(
            c,
            Verdict(passed=True, reason="ok")
            if passed(c)
            else Verdict(passed=False, reason="empty answer"),
        )
        for c in SUITE.cases
    ]


def test_scores_are_pass_rates_with_verdicts_against_thresholds() -> None:
    first_json_case = SUITE.cases_for(Capability.STRICT_JSON)[0]
    results = _results(lambda c: c is not first_json_case)
    scores = SUITE.score(results)
    assert scores[Capability.STRICT_JSON] == (0.75, "fail")
    assert scores[Capability.TOOL_CALLING] == (1.0, "pass")
    lenient = Suite(thresholds={Capability.STRICT_JSON: 0.75})
    assert lenient.score(results)[Capability.STRICT_JSON] == (0.75, "pass")
    assert lenient.threshold(Capability.TOOL_CALLING) == 0.8
    strict = Suite(default_threshold=1.0)
    assert strict.score(_results(lambda c: True))[Capability.PLANNING] == (1.0, "pass")


def test_missing_results_count_as_failures() -> None:
    partial = [r for r in _results(lambda c: True) if r.capability != Capability.PLANNING]
    partial += [
        SUITE.result(SUITE.cases_for(Capability.PLANNING)[0], Verdict(passed=True, reason="ok"))
    ]
    assert SUITE.score(partial)[Capability.PLANNING] == (0.25, "fail")
    assert SUITE.score([])[Capability.MULTI_TURN] == (0.0, "fail")


def test_scoring_rejects_results_that_do_not_belong() -> None:
    good = _results(lambda c: True)
    with pytest.raises(ValueError, match="not a case"):
        SUITE.score([*good[1:], good[0].model_copy(update={"case_id": "tool-calling/other"})])
    with pytest.raises(ValueError, match="two results"):
        SUITE.score([*good, good[0]])
    with pytest.raises(ValueError, match="belongs to"):
        SUITE.score([good[0].model_copy(update={"capability": Capability.PLANNING})])
    unanswered = SUITE.unanswered(SUITE.cases[0])
    assert (unanswered.passed, unanswered.reason) == (False, "the provider returned no answer")
    for bad in ({"default_threshold": 1.5}, {"thresholds": {Capability.PLANNING: -0.1}}):
        with pytest.raises(ValueError):
            Suite(**bad)


# --- reliable-context sizing -----------------------------------------------------------------


def _estimated_tokens(request: SuiteRequest) -> float:
    chars = len(request.system) + sum(len(m.content or "") for m in request.messages)
    return chars / CHARS_PER_TOKEN


@pytest.mark.parametrize(
    ("max_context_tokens", "cap", "tested"),
    [
        (None, 16_000, 16_000),
        (4096, 16_000, 4096),
        (200_000, 16_000, 16_000),
        (200_000, 24_000, 24_000),
    ],
)
def test_reliable_context_fills_the_window_up_to_the_cap(
    max_context_tokens: int | None, cap: int, tested: int
) -> None:
    suite = Suite(max_context_tokens=max_context_tokens, context_token_cap=cap)
    assert suite.context_tokens == tested
    for case in suite.cases_for(Capability.RELIABLE_CONTEXT):
        # The prompt and the answer it allows (a reasoning model's reasoning included) fill
        # the window, and stay under it.
        request = case.start()
        assert request.max_tokens is not None and request.max_tokens >= 1024
        tokens = _estimated_tokens(request) + request.max_tokens
        assert 0.88 * tested <= tokens <= tested, (case.case_id, tokens)


def test_reliable_context_plants_facts_at_their_depths() -> None:
    case = SUITE.case("reliable-context/depth-90")
    assert isinstance(case, ContextCase)
    text = case.start().first_user_text
    position = text.index("The access code for the Vega vault is 6602-RS.")
    assert 0.85 <= position / len(text) <= 0.95
    assert text.count("vault is") == 2  # the fact and its distractor


def test_reliable_context_needs_a_usable_window() -> None:
    with pytest.raises(ValueError):
        Suite(max_context_tokens=512)
    with pytest.raises(ValueError):
        Suite(context_token_cap=100)


def test_the_oracle_recognises_context_cases_of_any_size() -> None:
    small, large = Suite(max_context_tokens=2048), Suite(max_context_tokens=8192)
    oracle = Oracle(small)
    for case in large.cases_for(Capability.RELIABLE_CONTEXT):
        assert run_case(case, oracle.answer).passed
