"""The suite end to end through the real SDKs and the local upstream simulator: a model
scripted to be competent passes every capability; one scripted to fail chosen capabilities
fails exactly those, below threshold, through the same wire protocols a provider speaks."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anthropic
import openai
import pytest

from domain.enums import Capability
from domain.suite import (
    CaseResult,
    Suite,
    SuiteAnswer,
    SuiteRequest,
    SuiteToolCall,
    run_case_async,
)
from providers.upstream import ChatTurn, Reply, ToolCallReply, ToolSpec, TurnMessage, UpstreamServer
from providers.upstream.suite_responders import (
    answer_to_reply,
    competent_responder,
    failing_responder,
    turn_to_request,
)

SUITE = Suite(max_context_tokens=4096)
Ask = Callable[[SuiteRequest], Awaitable[SuiteAnswer]]


@pytest.fixture(scope="module")
async def upstream() -> AsyncIterator[UpstreamServer]:
    async with UpstreamServer() as server:
        server.register("competent", competent_responder(SUITE))
        server.register("no-tools", failing_responder(SUITE, {Capability.TOOL_CALLING}))
        server.register(
            "forgetful",
            failing_responder(SUITE, {Capability.RELIABLE_CONTEXT, Capability.PATCH_SUCCESS}),
        )
        yield server


@pytest.fixture
async def sdk(upstream: UpstreamServer) -> AsyncIterator[openai.AsyncOpenAI]:
    client = openai.AsyncOpenAI(
        base_url=upstream.openai_base_url, api_key="k", max_retries=0, timeout=10
    )
    yield client
    await client.close()


@pytest.fixture
async def claude(upstream: UpstreamServer) -> AsyncIterator[anthropic.AsyncAnthropic]:
    client = anthropic.AsyncAnthropic(
        base_url=upstream.base_url, api_key="k", max_retries=0, timeout=10
    )
    yield client
    await client.close()


# --- what the evaluation runner does, here straight onto the SDKs ---------------------------


def openai_arguments(request: SuiteRequest) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": request.system}]
    for m in request.messages:
        if m.role == "tool":
            messages.append({"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content})
        elif m.tool_calls:
            calls = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in m.tool_calls
            ]
            messages.append({"role": "assistant", "content": m.content, "tool_calls": calls})
        else:
            messages.append({"role": m.role, "content": m.content or ""})
    kwargs: dict[str, Any] = {
        "messages": messages,
        "temperature": request.temperature,
        "max_tokens": request.max_tokens,
    }
    if request.tools:
        kwargs["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                },
            }
            for t in request.tools
        ]
    if request.tool_choice is not None:
        mode, name = request.tool_choice.mode, request.tool_choice.name
        kwargs["tool_choice"] = {"type": "function", "function": {"name": name}} if name else mode
    if request.parallel_tool_calls is not None:
        kwargs["parallel_tool_calls"] = request.parallel_tool_calls
    fmt = request.response_format
    if fmt is not None and fmt.type == "json_object":
        kwargs["response_format"] = {"type": "json_object"}
    elif fmt is not None and fmt.type == "json_schema":
        schema = {"name": fmt.name or "output", "schema": fmt.json_schema, "strict": fmt.strict}
        kwargs["response_format"] = {"type": "json_schema", "json_schema": schema}
    return kwargs


def openai_ask(client: openai.AsyncOpenAI, model: str, stream: bool = False) -> Ask:
    async def ask(request: SuiteRequest) -> SuiteAnswer:
        kwargs = openai_arguments(request)
        if not stream:
            completion = await client.chat.completions.create(model=model, **kwargs)
            choice = completion.choices[0]
            calls = tuple(
                SuiteToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments)
                for c in choice.message.tool_calls or []
                if c.type == "function"
            )
            return SuiteAnswer(
                text=choice.message.content or "",
                tool_calls=calls,
                finish_reason=choice.finish_reason,
            )
        text: list[str] = []
        parts: dict[int, dict[str, Any]] = {}
        finish = "stop"
        async for chunk in await client.chat.completions.create(model=model, stream=True, **kwargs):
            for choice in chunk.choices:
                text.append(choice.delta.content or "")
                for delta in choice.delta.tool_calls or []:
                    part = parts.setdefault(delta.index, {"id": "", "name": "", "args": []})
                    part["id"] = part["id"] or delta.id or ""
                    if delta.function is not None:
                        part["name"] = part["name"] or delta.function.name or ""
                        part["args"].append(delta.function.arguments or "")
                finish = choice.finish_reason or finish
        calls = tuple(
            SuiteToolCall(id=p["id"], name=p["name"], arguments="".join(p["args"]))
            for _, p in sorted(parts.items())
        )
        return SuiteAnswer(text="".join(text), tool_calls=calls, finish_reason=finish)

    return ask


def anthropic_ask(client: anthropic.AsyncAnthropic, model: str) -> Ask:
    async def ask(request: SuiteRequest) -> SuiteAnswer:
        messages: list[dict[str, Any]] = []
        for m in request.messages:
            if m.role == "tool":
                block = {"type": "tool_result", "tool_use_id": m.tool_call_id, "content": m.content}
                if (
                    messages
                    and messages[-1]["role"] == "user"
                    and isinstance(messages[-1]["content"], list)
                ):
                    messages[-1]["content"].append(block)
                else:
                    messages.append({"role": "user", "content": [block]})
            elif m.role == "assistant":
                blocks: list[dict[str, Any]] = (
                    [{"type": "text", "text": m.content}] if m.content else []
                )
                blocks += [
                    {
                        "type": "tool_use",
                        "id": c.id,
                        "name": c.name,
                        "input": json.loads(c.arguments),
                    }
                    for c in m.tool_calls
                ]
                messages.append({"role": "assistant", "content": blocks})
            else:
                messages.append({"role": "user", "content": m.content or ""})
        tools = [
            {"name": t.name, "description": t.description or "", "input_schema": t.parameters}
            for t in request.tools
        ]
        message = await client.messages.create(
            model=model,
            max_tokens=request.max_tokens or 1024,
            system=request.system,
            messages=messages,  # type: ignore[arg-type]
            tools=tools,  # type: ignore[arg-type]
        )
        text = "".join(b.text for b in message.content if b.type == "text")
        calls = tuple(
            SuiteToolCall(id=b.id, name=b.name, arguments=json.dumps(b.input))
            for b in message.content
            if b.type == "tool_use"
        )
        finish = {"tool_use": "tool_calls", "max_tokens": "length"}.get(
            message.stop_reason or "", "stop"
        )
        return SuiteAnswer(text=text, tool_calls=calls, finish_reason=finish)

    return ask


async def evaluate(ask: Ask, capabilities: set[Capability] | None = None) -> list[CaseResult]:
    return [
        await run_case_async(case, ask)
        for case in SUITE.cases
        if capabilities is None or case.capability in capabilities
    ]


# --- the ChatTurn / Reply mapping -----------------------------------------------------------


def test_chat_turn_maps_to_the_suite_request_and_back() -> None:
    turn = ChatTurn(
        api="openai",
        model="m",
        system="sys",
        messages=[
            TurnMessage(role="user", text="hi"),
            TurnMessage(
                role="assistant",
                tool_calls=[ToolCallReply(id="t1", name="read_file", arguments={"path": "a"})],
            ),
            TurnMessage(role="tool", text="content", tool_call_id="t1"),
        ],
        tools=[ToolSpec(name="read_file", parameters={"type": "object"})],
        tool_choice="tool",
        tool_name="read_file",
        parallel_tool_calls=False,
        response_format="json_schema",
        json_schema={"type": "object"},
        max_tokens=99,
    )
    request = turn_to_request(turn)
    assert request.system == "sys" and request.first_user_text == "hi"
    assert request.messages[1].tool_calls[0] == SuiteToolCall(
        id="t1", name="read_file", arguments='{"path": "a"}'
    )
    assert request.messages[2].tool_call_id == "t1" and request.messages[2].content == "content"
    assert request.tool_choice is not None and request.tool_choice.name == "read_file"
    assert request.parallel_tool_calls is False and request.max_tokens == 99
    assert request.response_format is not None and request.response_format.json_schema == {
        "type": "object"
    }
    reply = answer_to_reply(
        SuiteAnswer(text="t", tool_calls=(SuiteToolCall(id="x", name="f", arguments='{"a": "3"}'),))
    )
    assert reply == Reply(text="t", tool_calls=[ToolCallReply(name="f", arguments='{"a": "3"}')])


# --- end to end ------------------------------------------------------------------------------


async def test_competent_model_passes_every_capability_through_the_openai_sdk(
    sdk: openai.AsyncOpenAI,
) -> None:
    results = await evaluate(openai_ask(sdk, "competent"))
    assert [r for r in results if not r.passed] == []
    assert all(score == (1.0, "pass") for score in SUITE.score(results).values())


async def test_model_scripted_to_fail_tool_calling_scores_below_threshold(
    sdk: openai.AsyncOpenAI,
) -> None:
    results = await evaluate(openai_ask(sdk, "no-tools"))
    scores = SUITE.score(results)
    assert scores[Capability.TOOL_CALLING] == (0.0, "fail")
    assert scores[Capability.TOOL_CALLING].pass_rate < SUITE.threshold(Capability.TOOL_CALLING)
    assert {c for c, s in scores.items() if s.verdict == "fail"} == {Capability.TOOL_CALLING}
    reasons = {r.reason for r in results if not r.passed}
    assert "extra argument 'force' in call to 'delete_file'" in reasons
    assert "argument 'days' of 'get_weather' has the wrong type" in reasons


async def test_failures_of_chosen_capabilities_survive_streaming(sdk: openai.AsyncOpenAI) -> None:
    chosen = {Capability.RELIABLE_CONTEXT, Capability.PATCH_SUCCESS, Capability.AGENT_TASK_SUCCESS}
    results = await evaluate(openai_ask(sdk, "forgetful", stream=True), chosen)
    scores = SUITE.score(results)
    assert scores[Capability.RELIABLE_CONTEXT] == (0.0, "fail")
    assert scores[Capability.PATCH_SUCCESS] == (0.0, "fail")
    assert scores[Capability.AGENT_TASK_SUCCESS] == (1.0, "pass")


async def test_tool_tasks_and_conversations_through_the_anthropic_sdk(
    claude: anthropic.AsyncAnthropic,
) -> None:
    chosen = {
        Capability.TOOL_CALLING,
        Capability.ERROR_RECOVERY,
        Capability.MULTI_TURN,
        Capability.RELIABLE_CONTEXT,
    }
    good = SUITE.score(await evaluate(anthropic_ask(claude, "competent"), chosen))
    bad = SUITE.score(await evaluate(anthropic_ask(claude, "no-tools"), chosen))
    for capability in chosen:
        assert good[capability] == (1.0, "pass")
        expected = "fail" if capability == Capability.TOOL_CALLING else "pass"
        assert bad[capability].verdict == expected


async def test_unknown_requests_get_the_simulators_default_answer(sdk: openai.AsyncOpenAI) -> None:
    completion = await sdk.chat.completions.create(
        model="competent", messages=[{"role": "user", "content": "hello"}]
    )
    assert completion.choices[0].message.content == "Echo: hello"
