"""Responders decide what a simulated model answers. One is registered per model name:

    from providers.upstream import Reply, ToolCallReply, UpstreamServer

    def competent(turn: ChatTurn) -> Reply:
        if turn.tools:
            return Reply(tool_calls=[ToolCallReply(name=turn.tools[0].name, arguments={"x": 1})])
        return Reply(text="42")

    async with UpstreamServer() as upstream:
        upstream.state.register("good-model", competent)

A responder may be sync or async, and may raise; the simulator then answers 500 (a model that
crashed), which the adapters classify as a transient server error.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

from providers.upstream.schema_fill import instance_for
from providers.upstream.turn import ChatTurn, Reply, ToolCallReply


class Responder(Protocol):
    def __call__(self, turn: ChatTurn) -> Reply | Awaitable[Reply]: ...


async def respond(responder: Responder | Callable[[ChatTurn], object], turn: ChatTurn) -> Reply:
    result = responder(turn)
    if inspect.isawaitable(result):
        result = await result
    if not isinstance(result, Reply):
        raise TypeError(f"responder returned {type(result).__name__}, not Reply")
    return result


def default_responder(turn: ChatTurn) -> Reply:
    """Deterministic and protocol-correct: calls a tool when the request requires it, or
    permits it on a fresh user turn (the first tool, or the named one, with arguments built
    from its schema); answers JSON when JSON is asked for; otherwise echoes the user."""
    if turn.tools and turn.tool_choice != "none":
        forced = turn.tool_choice in ("required", "tool")
        if forced or (turn.tool_choice == "auto" and turn.last.role == "user"):
            tool = turn.tool(turn.tool_name) if turn.tool_name else turn.tools[0]
            tool = tool or turn.tools[0]
            return Reply(
                tool_calls=[ToolCallReply(name=tool.name, arguments=instance_for(tool.parameters))]
            )
    if turn.response_format == "json_schema" and turn.json_schema is not None:
        return Reply(text=json.dumps(instance_for(turn.json_schema)))
    if turn.response_format == "json_object":
        return Reply(text=json.dumps({"echo": turn.last_user_text}))
    if turn.last.role == "tool":
        said = "Tool error received" if turn.last.is_error else "Tool result received"
        return Reply(text=f"{said}: {turn.last.text}")
    text = turn.last_user_text
    return Reply(text=f"Echo: {text}" if text else "Hello from the upstream simulator.")


def parallel_tools_responder(turn: ChatTurn) -> Reply:
    """`default_responder`, except that on a fresh user turn that lets the model choose
    (`auto` or `required`, no tool named) it calls every offered tool at once, as a model
    with parallel tool calling does (the simulator keeps one when parallel_tool_calls is
    false). The dev simulator's demo model answers this way, as its evidence says it can."""
    free = turn.tool_choice in ("auto", "required") and not turn.tool_name
    if len(turn.tools) > 1 and free and turn.last.role == "user":
        return Reply(
            tool_calls=[
                ToolCallReply(name=t.name, arguments=instance_for(t.parameters)) for t in turn.tools
            ]
        )
    return default_responder(turn)


def fixed(reply: Reply | str) -> Responder:
    """Always the same answer."""
    answer = reply if isinstance(reply, Reply) else Reply(text=reply)

    def responder(turn: ChatTurn) -> Reply:
        return answer

    return responder


class ScriptedResponder:
    """Answers from a script, one Reply per request, in order; after the script runs out it
    repeats the last reply (or defers to `then` when given). `calls` counts requests seen."""

    def __init__(self, replies: Iterable[Reply | str], then: Responder | None = None) -> None:
        self._replies = [r if isinstance(r, Reply) else Reply(text=r) for r in replies]
        if not self._replies and then is None:
            raise ValueError("a script needs replies or a responder to fall back to")
        self._then = then
        self.calls = 0

    async def __call__(self, turn: ChatTurn) -> Reply:
        index = self.calls
        self.calls += 1
        if index < len(self._replies):
            return self._replies[index]
        if self._then is not None:
            return await respond(self._then, turn)
        return self._replies[-1]
