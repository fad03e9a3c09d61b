"""Simulator responders that take the capability suite: one answers every suite request as a
competent model would (the oracle's reference answer); another does too, except for the
cases of chosen capabilities, where it gives a plausible near miss. Requests that are not
the suite's get `default_responder`'s answer.

    suite = Suite(max_context_tokens=32_000)
    upstream.register("good-model", competent_responder(suite))
    upstream.register("no-tools-model", failing_responder(suite, {Capability.TOOL_CALLING}))

The responders recognise a request from its system prompt and first user message, so they
answer the suite's requests whatever order or concurrency the evaluation runs them in.

An answer that is a JSON object in text, to a request that forces a tool by name, goes out as
that tool's call with the object as its input: a model answers a forced tool choice with the
tool's call, never text. That is how a JSON-mode case reaches an Anthropic deployment (JSON
mode there is a tool the model must call, providers/anthropic_json_mode.py); answered as text,
the case passed without the answer tool's call ever being read back.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable

from pydantic import ValidationError

from domain.enums import Capability
from domain.suite import (
    Case,
    Oracle,
    Suite,
    SuiteAnswer,
    SuiteMessage,
    SuiteRequest,
    SuiteResponseFormat,
    SuiteTool,
    SuiteToolCall,
    SuiteToolChoice,
)
from providers.upstream.responders import Responder, default_responder
from providers.upstream.turn import ChatTurn, Reply, ToolCallReply, TurnMessage


def _arguments(arguments: dict[str, object] | str) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def _message(message: TurnMessage, index: int) -> SuiteMessage:
    calls = tuple(
        SuiteToolCall(
            id=c.id or f"call_{index}_{i}", name=c.name, arguments=_arguments(c.arguments)
        )
        for i, c in enumerate(message.tool_calls)
    )
    return SuiteMessage(
        role=message.role,
        content=message.text or None,
        tool_calls=calls if message.role == "assistant" else (),
        tool_call_id=(message.tool_call_id or f"call_{index}") if message.role == "tool" else None,
    )


def turn_to_request(turn: ChatTurn) -> SuiteRequest:
    """The suite's view of a simulated request (the inverse of the runner's mapping)."""
    choice = SuiteToolChoice(
        mode=turn.tool_choice, name=turn.tool_name if turn.tool_choice == "tool" else None
    )
    schema = turn.json_schema if turn.response_format == "json_schema" else None
    return SuiteRequest(
        system=turn.system,
        messages=tuple(_message(m, i) for i, m in enumerate(turn.messages)),
        tools=tuple(
            SuiteTool(name=t.name, description=t.description, parameters=t.parameters)
            for t in turn.tools
        ),
        tool_choice=choice if turn.tools else None,
        parallel_tool_calls=turn.parallel_tool_calls,
        response_format=SuiteResponseFormat(type=turn.response_format, json_schema=schema),
        max_tokens=turn.max_tokens,
    )


def answer_to_reply(answer: SuiteAnswer) -> Reply:
    """Arguments go out as the exact JSON text of the answer (a near miss such as "3" for 3
    must reach the client byte for byte); the simulator then applies the request's limits."""
    return Reply(
        text=answer.text,
        tool_calls=[
            ToolCallReply(id=None, name=c.name, arguments=c.arguments) for c in answer.tool_calls
        ],
    )


def _as_forced(reply: Reply, turn: ChatTurn) -> Reply:
    """`reply` as a model answers a turn that forces a tool by name (the module says why):
    text only that is a JSON object becomes that tool's call, its input the text as written (so
    a near miss keeps its exact JSON). Any other text stays text, as no tool input carries it:
    a near miss such as a JSON array or a Python dict still reaches the verifier."""
    if turn.tool_choice != "tool" or turn.tool_name is None or reply.tool_calls:
        return reply
    try:
        value = json.loads(reply.text)
    except ValueError:
        return reply
    if not isinstance(value, dict):
        return reply
    call = ToolCallReply(name=turn.tool_name, arguments=reply.text)
    return reply.model_copy(update={"text": "", "tool_calls": [call]})


def _suite_responder(
    suite: Suite,
    choose: Callable[[Case, SuiteRequest], SuiteAnswer],
    otherwise: Callable[[ChatTurn], Reply] = default_responder,
) -> Responder:
    oracle = Oracle(suite)

    def respond(turn: ChatTurn) -> Reply:
        try:
            request = turn_to_request(turn)
        except ValidationError:
            return otherwise(turn)
        case = oracle.case_for(request)
        if case is None:
            return otherwise(turn)
        return _as_forced(answer_to_reply(choose(case, request)), turn)

    return respond


def competent_responder(
    suite: Suite, otherwise: Callable[[ChatTurn], Reply] = default_responder
) -> Responder:
    """The suite's reference answers; `otherwise` answers every other request."""
    return _suite_responder(suite, lambda case, request: case.reference(request), otherwise)


def failing_responder(suite: Suite, fail: Iterable[Capability]) -> Responder:
    failing = frozenset(Capability(c) for c in fail)

    def choose(case: Case, request: SuiteRequest) -> SuiteAnswer:
        if case.capability in failing:
            return case.near_miss(request)
        return case.reference(request)

    return _suite_responder(suite, choose)
