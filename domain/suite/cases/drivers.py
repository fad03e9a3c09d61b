"""The two multi-step drivers: a scripted conversation (multi-turn) and a tool task over a
simulated world (file editing, shell, error recovery, agent tasks)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from domain.enums import Capability
from domain.suite.cases.base import Case, Exchange, calls, say
from domain.suite.reasons import Failure, Why, fail
from domain.suite.types import (
    SuiteAnswer,
    SuiteRequest,
    SuiteTool,
    SuiteToolCall,
    tool_result,
    user,
)
from domain.suite.verifiers.tools import call_arguments, check_call
from domain.suite.verifiers.values import canonical


class ConversationCase(Case):
    """User turns in a fixed order; each answer is checked before the next turn is sent, and
    the model's own answers stay in the history it sees."""

    def __init__(
        self,
        case_id: str,
        capability: Capability,
        system: str,
        exchanges: Sequence[Exchange],
        near_miss: Mapping[int, str],
        names: Sequence[str] = (),
    ) -> None:
        self.case_id = case_id
        self.capability = capability
        self.max_turns = len(exchanges)
        self._system = system
        self._exchanges = tuple(exchanges)
        self._near_miss = dict(near_miss)
        self._names = tuple(names)

    def start(self) -> SuiteRequest:
        return SuiteRequest(system=self._system, messages=(user(self._exchanges[0].user),))

    def judge(self, history: SuiteRequest, answer: SuiteAnswer) -> SuiteRequest | Failure | None:
        turn = history.assistant_turns
        if answer.tool_calls:
            return fail(Why.UNEXPECTED_TOOL_CALL, answer.tool_calls[0].name)
        broken = self._exchanges[turn].check(answer.text)
        if broken is not None or turn == len(self._exchanges) - 1:
            return broken
        return history.followed_by(answer.as_message(), user(self._exchanges[turn + 1].user))

    def _turn(self, request: SuiteRequest) -> int:
        return min(request.assistant_turns, len(self._exchanges) - 1)

    def reference(self, request: SuiteRequest) -> SuiteAnswer:
        return say(self._exchanges[self._turn(request)].reference)

    def near_miss(self, request: SuiteRequest) -> SuiteAnswer:
        turn = self._turn(request)
        return say(self._near_miss.get(turn, self._exchanges[turn].reference))

    def names(self) -> Iterable[str]:
        return self._names


World = dict[str, Any]
# More calls than any task needs in one turn: beyond it the answer is not a serious attempt.
MAX_CALLS_PER_TURN = 16


class ToolError(Exception):
    """A simulated tool's failure, returned to the model as `error: <message>`. A transient
    one (a timeout, a rate limit) may be retried; repeating a permanently failed call is a
    failure of the case."""

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


@dataclass(frozen=True)
class SimTool:
    spec: SuiteTool
    run: Callable[[World, dict[str, Any]], str]


@dataclass(frozen=True)
class Calls:
    """A scripted assistant turn of tool calls."""

    calls: tuple[tuple[str, Mapping[str, Any] | str], ...]


@dataclass(frozen=True)
class Say:
    """A scripted final answer."""

    text: str


Move = Calls | Say


def call(name: str, **arguments: Any) -> Calls:
    return Calls(((name, arguments),))


class ToolTaskCase(Case):
    """A goal reached through simulated tools. Each answer's calls are validated against the
    tool schemas and run on a world rebuilt by replaying the history; an answer without calls
    ends the task and `goal(world, final_text)` judges it."""

    def __init__(
        self,
        case_id: str,
        capability: Capability,
        *,
        system: str,
        prompt: str,
        tools: Sequence[SimTool],
        world: Callable[[], World],
        goal: Callable[[World, str], Failure | None],
        script: Sequence[Move],
        near_miss: Mapping[int, Move],
        max_turns: int = 8,
        names: Sequence[str] = (),
    ) -> None:
        self.case_id = case_id
        self.capability = capability
        self.max_turns = max_turns
        self._system = system
        self._prompt = prompt
        self._tools = {t.spec.name: t for t in tools}
        self._world = world
        self._goal = goal
        self._script = tuple(script)
        self._near_miss = dict(near_miss)
        self._names = tuple(names)

    def start(self) -> SuiteRequest:
        return SuiteRequest(
            system=self._system,
            messages=(user(self._prompt),),
            tools=tuple(t.spec for t in self._tools.values()),
        )

    def names(self) -> Iterable[str]:
        return self._names

    def _run(self, world: World, failed: set[str], tool_call: SuiteToolCall) -> str | Failure:
        tool = self._tools.get(tool_call.name)
        specs = [t.spec for t in self._tools.values()]
        broken = check_call(tool_call, specs)
        if tool is None or broken is not None:
            return broken or fail(Why.UNKNOWN_TOOL, tool_call.name)
        arguments = call_arguments(tool_call)
        if not isinstance(arguments, dict):  # unreachable: check_call parsed them already
            return arguments
        key = f"{tool_call.name}:{canonical(arguments)}"
        if key in failed:
            return fail(Why.REPEATED_FAILED_CALL, tool_call.name)
        try:
            return tool.run(world, arguments)
        except ToolError as error:
            if not error.transient:
                failed.add(key)
            return f"error: {error}"

    def replay(self, history: SuiteRequest) -> tuple[World, set[str]]:
        """The world after every call the history holds (all were valid when judged)."""
        world, failed = self._world(), set[str]()
        for message in history.messages:
            for tool_call in message.tool_calls:
                self._run(world, failed, tool_call)
        return world, failed

    def judge(self, history: SuiteRequest, answer: SuiteAnswer) -> SuiteRequest | Failure | None:
        world, failed = self.replay(history)
        if not answer.tool_calls:
            return self._goal(world, answer.text)
        if history.assistant_turns + 1 >= self.max_turns:
            return fail(Why.TURN_LIMIT, self.max_turns)
        if len(answer.tool_calls) > MAX_CALLS_PER_TURN:
            return fail(Why.CALL_COUNT, len(answer.tool_calls), MAX_CALLS_PER_TURN)
        results = []
        for tool_call in answer.tool_calls:
            outcome = self._run(world, failed, tool_call)
            if isinstance(outcome, Failure):
                return outcome
            results.append(tool_result(tool_call.id, outcome))
        return history.followed_by(answer.as_message(), *results)

    def _answer(self, move: Move, turn: int) -> SuiteAnswer:
        if isinstance(move, Say):
            return say(move.text)
        return calls(*move.calls, turn=turn)

    def reference(self, request: SuiteRequest) -> SuiteAnswer:
        turn = request.assistant_turns
        return self._answer(self._script[min(turn, len(self._script) - 1)], turn)

    def near_miss(self, request: SuiteRequest) -> SuiteAnswer:
        turn = request.assistant_turns
        move = self._near_miss.get(turn, self._script[min(turn, len(self._script) - 1)])
        return self._answer(move, turn)
