"""The Responses surface's items, given and taken back: a whole answer's output items in the
order and with the ids its stream and its replay give; an assistant message sent back after
its turn's function calls (as the Agents SDK sends an answer of text, call, text) kept in that
turn, before the calls' outputs; and references to this gateway's own output items (as the
AI SDK sends its earlier output) read from the answers it keeps for replays, the caller's
tenant's only and while they are kept. The openai SDK is the client; the local upstream the
provider."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import openai
import pytest
from openai import AsyncOpenAI
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api.invocation_events import Replayed
from api.responses_answers import output_items
from api.responses_shapes import ResponsesIn
from api.responses_stream import ResponseEvents
from api.wire import replay_events
from core.settings import Settings
from domain.enums import InvocationOutcome
from domain.invocation import InvocationSummary
from providers.completion_fold import collect_events
from providers.types import Finish, FinishReason, TextDelta, ToolCallDelta
from providers.upstream import ChatTurn, Reply, UpstreamServer, default_responder
from providers.upstream.turn import ToolCallReply, TurnMessage
from store.artifacts import ArtifactStore
from tests.conftest import TokenFactory
from tests.helpers.deadline import eventually
from tests.helpers.surfaces import PROTOCOLS, Catalog, receipt

DAY = 86_400.0
WEATHER: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


@pytest.fixture
async def client(api_url: str, token_for: TokenFactory, tenant: str) -> AsyncIterator[AsyncOpenAI]:
    async with AsyncOpenAI(
        base_url=f"{api_url}/v1", api_key=await token_for(tenant), max_retries=0
    ) as c:
        yield c


@pytest.fixture
def turns(upstream: UpstreamServer, catalog: Catalog) -> Iterator[list[ChatTurn]]:
    """The requests the catalog's models got, as the upstream parsed them; each answered as
    the upstream answers by default."""
    seen: list[ChatTurn] = []

    def record(turn: ChatTurn) -> Reply:
        seen.append(turn)
        return default_responder(turn)

    for protocol in PROTOCOLS:
        upstream.register(catalog.model(protocol), record)
    yield seen
    for protocol in PROTOCOLS:
        upstream.register(catalog.model(protocol), default_responder)


def _call(index: int, call_id: str, arguments: str) -> ToolCallDelta:
    return ToolCallDelta(index=index, id=call_id, name="get_weather", arguments_delta=arguments)


# Answers of text and calls in every order a provider sends them (Anthropic's [text, tool_use,
# text] among them), each with the items its stream gives.
ANSWERS: dict[str, list[TextDelta | ToolCallDelta | Finish]] = {
    "text-call-text": [
        TextDelta(text="Let me check."),
        _call(0, "call_1", '{"city":"Paris"}'),
        TextDelta(text="Done, see above."),
        Finish(reason=FinishReason.TOOL_CALLS),
    ],
    "call-text": [
        _call(0, "call_1", "{}"),
        TextDelta(text="Asked."),
        Finish(reason=FinishReason.TOOL_CALLS),
    ],
    "text-interleaved-calls-text": [
        TextDelta(text="Two at once."),
        _call(0, "call_1", '{"city":'),
        _call(1, "call_2", '{"city":"Rome"}'),
        ToolCallDelta(index=0, arguments_delta='"Oslo"}'),
        TextDelta(text="Both asked."),
        Finish(reason=FinishReason.TOOL_CALLS),
    ],
}


async def _final_output(
    invocation: uuid.UUID, events: list[TextDelta | ToolCallDelta | Finish]
) -> list[dict[str, Any]]:
    """The output of the final response of a Responses stream of these events."""
    writer = ResponseEvents(invocation, ResponsesIn(model="p", input="x"))
    streamed = writer.start() + b"".join(writer.add(event) for event in events)
    summary = InvocationSummary(
        invocation_id=invocation, outcome=InvocationOutcome.COMPLETED, deployment_id="d"
    )
    streamed += await writer.end(summary)
    last = [line for line in streamed.split(b"\n") if line.startswith(b"data: ")][-1]
    output: list[dict[str, Any]] = json.loads(last.removeprefix(b"data: "))["response"]["output"]
    return output


def _shape(items: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [
        (i["type"], i["id"], i["content"][0]["text"])
        if i["type"] == "message"
        else (i["type"], i["id"], f"{i['call_id']} {i['arguments']}")
        for i in items
    ]


@pytest.mark.parametrize("answer", ANSWERS)
async def test_a_whole_answer_gives_the_items_and_ids_of_its_stream_and_its_replay(
    answer: str,
) -> None:
    """Built from the text and the calls, a whole answer put the calls first or last and
    fused the runs of text around them: [text, call, text] came out [call, message] with
    "Let me check.Done, see above.", and a message after a call had another id than the
    stream's, while the stream and the replay gave [message, call, message]."""
    events = ANSWERS[answer]
    invocation = uuid.uuid4()
    done = collect_events(events)  # the one fold of stream and whole alike
    streamed = await _final_output(invocation, events)
    replayed = await _final_output(
        invocation, replay_events(Replayed(output=done.model_dump_json().encode()))
    )
    whole = output_items(invocation, done)
    assert _shape(whole) == _shape(streamed) == _shape(replayed)
    if answer == "text-call-text":
        hex_ = invocation.hex
        assert _shape(whole) == [
            ("message", f"msg_{hex_}", "Let me check."),
            ("function_call", f"fc_{hex_}_0", 'call_1 {"city":"Paris"}'),
            ("message", f"msg_{hex_}_2", "Done, see above."),
        ]


def _valid_chat(messages: list[TurnMessage]) -> bool:
    """OpenAI's rule for a Chat history: an assistant message with tool_calls is followed at
    once by a tool message for each of them."""
    for at, message in enumerate(messages):
        if message.role == "assistant" and message.tool_calls:
            after = messages[at + 1 : at + 1 + len(message.tool_calls)]
            if [m.role for m in after] != ["tool"] * len(message.tool_calls):
                return False
            if {m.tool_call_id for m in after} != {c.id for c in message.tool_calls}:
                return False
    return True


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_text_sent_back_after_its_turns_calls_stays_in_that_turn(
    client: AsyncOpenAI, catalog: Catalog, turns: list[ChatTurn], protocol: str
) -> None:
    """[user, function_call, message, function_call_output], as the Agents SDK sends back an
    answer of text after a call, mapped to assistant(tool_calls), assistant(text), tool: a
    history OpenAI refuses (the tool messages must follow their calls at once). The text joins
    its turn, after the text before the calls; a Chat message holds one text, before its
    calls."""
    history: Any = [
        {"role": "user", "content": "weather in Paris?"},
        {"type": "message", "role": "assistant", "content": "Let me check."},
        {
            "type": "function_call",
            "call_id": "call_a",
            "name": "get_weather",
            "arguments": '{"city":"Paris"}',
        },
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Done, see above."}],
        },
        {"type": "function_call_output", "call_id": "call_a", "output": "sunny"},
    ]
    answer = await client.responses.create(
        model=catalog.profile(protocol), input=history, tools=[WEATHER]
    )
    assert answer.status == "completed"
    [turn] = turns
    assert _valid_chat(turn.messages), [(m.role, m.tool_call_id) for m in turn.messages]
    assistant = turn.messages[1]
    assert assistant.text == "Let me check.\nDone, see above."
    assert [c.id for c in assistant.tool_calls] == ["call_a"]
    assert [m.role for m in turn.messages] == ["user", "assistant", "tool"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_reference_to_an_answer_of_ours_stands_for_its_item(
    client: AsyncOpenAI, catalog: Catalog, turns: list[ChatTurn], protocol: str
) -> None:
    """@ai-sdk/openai (store defaults to true) sends its earlier output as item references to
    our own ids: every second turn was a 400."""
    first = await client.responses.create(model=catalog.profile(protocol), input="hello there")
    assert first.output_text == "Echo: hello there"
    ref = first.output[0].id
    follow: Any = [
        {"role": "user", "content": "hello there"},
        {"type": "item_reference", "id": ref},
        {"role": "user", "content": "again"},
        {"id": ref},  # the SDK's `type` is optional
        {"role": "user", "content": "and again"},
    ]
    second = await client.responses.create(model=catalog.profile(protocol), input=follow)
    assert second.output_text == "Echo: and again"
    sent = turns[-1].messages
    assert [(m.role, m.text) for m in sent] == [
        ("user", "hello there"),
        ("assistant", "Echo: hello there"),
        ("user", "again"),
        ("assistant", "Echo: hello there"),
        ("user", "and again"),
    ]


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_references_to_a_calls_items_make_a_valid_turn(
    client: AsyncOpenAI, upstream: UpstreamServer, catalog: Catalog, protocol: str
) -> None:
    """An answer of text and a call, referred to item by item and followed by the call's
    output: one assistant turn of that text and call, its output after it."""
    seen: list[ChatTurn] = []
    call = ToolCallReply(name="get_weather", arguments={"city": "Oslo"})

    def answer(turn: ChatTurn) -> Reply:
        seen.append(turn)
        if turn.last.role == "user":
            return Reply(text="Looking.", tool_calls=[call])
        return Reply(text=f"It is {turn.last.text}.")

    upstream.register(catalog.model(protocol), answer)
    try:
        first = await client.responses.create(
            model=catalog.profile(protocol), input="weather?", tools=[WEATHER]
        )
        [said, asked] = first.output
        assert said.type == "message" and asked.type == "function_call"
        follow: Any = [
            {"role": "user", "content": "weather?"},
            {"type": "item_reference", "id": said.id},
            {"type": "item_reference", "id": asked.id},
            {"type": "function_call_output", "call_id": asked.call_id, "output": "cold"},
        ]
        second = await client.responses.create(
            model=catalog.profile(protocol), input=follow, tools=[WEATHER]
        )
    finally:
        upstream.register(catalog.model(protocol), default_responder)
    assert second.output_text == "It is cold."
    sent = seen[-1].messages
    assert _valid_chat(sent)
    assert [(m.role, m.text) for m in sent] == [
        ("user", "weather?"),
        ("assistant", "Looking."),
        ("tool", "cold"),
    ]
    assert [(c.id, c.name) for c in sent[1].tool_calls] == [(asked.call_id, "get_weather")]


async def test_a_reference_not_kept_here_is_refused_saying_what_to_send(
    client: AsyncOpenAI,
    catalog: Catalog,
    api_url: str,
    token_for: TokenFactory,
    turns: list[ChatTurn],
) -> None:
    """One of our ids whose answer this tenant does not have (another tenant's, or none at
    all), and an id of another server's: a 400 naming the reference, saying to send the item
    or store: false, and nothing reaches the provider."""
    profile = catalog.profile("openai")
    theirs = f"tenant-{uuid.uuid4().hex[:8]}"
    async with AsyncOpenAI(
        base_url=f"{api_url}/v1", api_key=await token_for(theirs), max_retries=0
    ) as other:
        answered = await client.responses.create(model=profile, input="mine")
        for ref, param in (
            (answered.output[0].id, "input.1.id"),  # this tenant's, asked by another
            (f"msg_{uuid.uuid4().hex}_2", "input.1.id"),  # of ours, never answered
            (f"fc_{uuid.uuid4().hex}_0", "input.1.id"),
            ("msg_67f0c1d2e3", "input.1"),  # another server's
        ):
            request: Any = [
                {"role": "user", "content": "mine"},
                {"type": "item_reference", "id": ref},
            ]
            with pytest.raises(openai.BadRequestError) as refused:
                await other.responses.create(model=profile, input=request)
            error: Any = refused.value.body
            assert (error["param"], error["type"]) == (param, "invalid_request_error"), error
            assert "send the item itself" in error["message"], error
            assert "store: false" in error["message"], error
    assert len(turns) == 1  # the first answer's only


async def test_a_reference_to_an_answer_past_its_retention_is_refused(
    client: AsyncOpenAI,
    catalog: Catalog,
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """The answer's file removed by the tenant's retention (the sweeper's purge): no longer
    kept, and the caller is told to send the item itself."""
    profile, key = catalog.profile("openai"), f"items-{uuid.uuid4().hex}"
    answered = await client.responses.create(
        model=profile, input=f"kept for a while {key}", extra_headers={"Idempotency-Key": key}
    )
    row = await receipt(sessions, catalog.tenant, key)
    assert row.output_artifact_ref is not None
    digest = row.output_artifact_ref.removeprefix("sha256:")
    store = ArtifactStore(settings.artifact_root)
    path = store.root / catalog.tenant / digest[:2] / digest
    # Filed beside the close, which may land after the answer was sent (activities/
    # invoke_close.py): touched at once, it was not there yet under load.
    await eventually(path.exists)
    long_ago = time.time() - 40 * DAY
    os.utime(path, (long_ago, long_ago))
    assert store.purge_slot(digest[:2], 30 * DAY) >= 1 and not path.exists()
    request: Any = [
        {"role": "user", "content": "again"},
        {"type": "item_reference", "id": answered.output[0].id},
    ]
    with pytest.raises(openai.BadRequestError) as refused:
        await client.responses.create(model=profile, input=request)
    error: Any = refused.value.body
    assert error["param"] == "input.1.id", error
    assert "no longer keeps" in error["message"] and "send the item itself" in error["message"]
