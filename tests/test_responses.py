"""The OpenAI Responses surface (stateless) with the official openai SDK as the client, against
an OpenAI-protocol and an Anthropic-protocol deployment of the local upstream: responses.create
and responses.stream, a function-call round trip, text.format JSON, usage equal to the
receipt's, idempotency, pinned runs, a cut stream, and what is refused."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any, cast

import httpx
import openai
import pytest
from openai import AsyncOpenAI
from pydantic import BaseModel
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client

from api.invocation_events import Replayed
from api.responses_answers import output_items
from api.responses_shapes import ResponsesIn
from api.responses_stream import ResponseEvents
from api.wire import replay_events
from domain.enums import InvocationOutcome
from domain.invocation import InvocationSummary
from providers.completion_fold import collect_events
from providers.types import Completion, Finish, FinishReason, TextDelta, ToolCall, ToolCallDelta
from providers.upstream import (
    ChatTurn,
    Fault,
    FaultKind,
    Reply,
    UpstreamServer,
    default_responder,
)
from providers.upstream.turn import ToolCallReply
from store.tables import InvocationReceiptRow
from tests.conftest import TokenFactory
from tests.helpers.catalog import approved_deployment, profile_event, publish
from tests.helpers.surfaces import PROTOCOLS, Catalog, receipt

WEATHER: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}


class Apples(BaseModel):
    answer: int
    unit: str


@pytest.fixture
async def client(
    api_url: str, token_for: TokenFactory, tenant: str, catalog: Catalog
) -> AsyncIterator[AsyncOpenAI]:
    async with AsyncOpenAI(
        base_url=f"{api_url}/v1", api_key=await token_for(tenant), max_retries=0
    ) as c:
        yield c


def _usage_matches(usage: Any, row: InvocationReceiptRow) -> None:
    assert usage.input_tokens == row.input_tokens
    assert usage.output_tokens == row.output_tokens and (row.output_tokens or 0) > 0
    assert usage.input_tokens_details.cached_tokens == (row.cached_input_tokens or 0)
    assert usage.total_tokens == (row.input_tokens or 0) + (row.output_tokens or 0)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_create_with_the_receipts_usage(
    client: AsyncOpenAI,
    catalog: Catalog,
    sessions: async_sessionmaker[AsyncSession],
    protocol: str,
) -> None:
    key = f"resp-{uuid.uuid4().hex}"
    raw = await client.responses.with_raw_response.create(
        model=catalog.profile(protocol),
        instructions="be brief",
        input="hello responses",
        temperature=0.3,
        max_output_tokens=200,
        metadata={"ticket": "t-1"},
        extra_headers={"Idempotency-Key": key},
    )
    response = raw.parse()
    assert response.object == "response" and response.status == "completed"
    assert response.output_text == "Echo: hello responses"
    assert response.model == catalog.profile(protocol)
    assert getattr(response, "store", None) is False
    assert response.metadata == {"ticket": "t-1"}
    row = await receipt(sessions, catalog.tenant, key)
    assert response.id == f"resp_{row.invocation_id.hex}"
    assert raw.headers["x-model-router-usage-status"] == "Reported"
    extra: Any = getattr(response, "model_router")  # noqa: B009
    assert extra["receiptId"] == str(row.invocation_id)
    assert extra["deploymentId"] == row.deployment_id and extra["outcome"] == "Completed"
    assert raw.headers["x-model-router-receipt-id"] == str(row.invocation_id)
    assert raw.headers["x-model-router-deployment"] == catalog.deployment(protocol)
    assert (row.outcome, row.usage_status) == ("Completed", "Reported")
    _usage_matches(response.usage, row)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_stream_read_with_the_sdk_helper(
    client: AsyncOpenAI,
    catalog: Catalog,
    sessions: async_sessionmaker[AsyncSession],
    protocol: str,
) -> None:
    key = f"resp-stream-{uuid.uuid4().hex}"
    kinds: list[str] = []
    async with client.responses.stream(
        model=catalog.profile(protocol),
        input=[{"role": "user", "content": [{"type": "input_text", "text": "stream it now"}]}],
        extra_headers={"Idempotency-Key": key},
    ) as stream:
        async for event in stream:
            kinds.append(event.type)
        final = await stream.get_final_response()
    assert final.output_text == "Echo: stream it now"
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert "response.output_text.delta" in kinds
    assert kinds.index("response.output_item.added") < kinds.index("response.output_text.delta")
    # Only the Responses API's own event types: the SDK casts any other to the first class of
    # its union (an audio delta, without the fields one has).
    assert all(kind.startswith("response.") for kind in kinds), kinds
    row = await receipt(sessions, catalog.tenant, key)
    # The receipt rides on the final response, as a field the SDK keeps.
    extra = (final.model_extra or {})["model_router"]
    assert extra["receiptId"] == str(row.invocation_id)
    assert extra["deploymentId"] == catalog.deployment(protocol)
    _usage_matches(final.usage, row)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_function_call_round_trip(
    client: AsyncOpenAI, catalog: Catalog, protocol: str
) -> None:
    ask: Any = [{"role": "user", "content": "weather in Paris?"}]
    first = await client.responses.create(
        model=catalog.profile(protocol), input=ask, tools=[WEATHER], tool_choice="required"
    )
    [call] = [item for item in first.output if item.type == "function_call"]
    assert call.name == "get_weather" and isinstance(json.loads(call.arguments)["city"], str)
    follow: Any = [
        *ask,
        *[item.model_dump(exclude_none=True) for item in first.output],
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21C"},
    ]
    deltas: list[str] = []
    async with client.responses.stream(
        model=catalog.profile(protocol), input=follow, tools=[WEATHER]
    ) as stream:
        async for event in stream:
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        final = await stream.get_final_response()
    assert final.output_text == "Tool result received: sunny, 21C" == "".join(deltas)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_function_call_arguments_stream(
    client: AsyncOpenAI, catalog: Catalog, protocol: str
) -> None:
    arguments = ""
    async with client.responses.stream(
        model=catalog.profile(protocol),
        input="weather?",
        tools=[WEATHER],
        tool_choice={"type": "function", "name": "get_weather"},
    ) as stream:
        async for event in stream:
            if event.type == "response.function_call_arguments.delta":
                arguments += event.delta
        final = await stream.get_final_response()
    [call] = final.output
    assert call.type == "function_call" and call.arguments == arguments
    assert json.loads(arguments).keys() == {"city"}


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_json_output_through_text_format(
    client: AsyncOpenAI, catalog: Catalog, protocol: str
) -> None:
    schema = Apples.model_json_schema() | {"additionalProperties": False}
    plain = await client.responses.create(
        model=catalog.profile(protocol),
        input="2+2 in apples",
        text={"format": {"type": "json_schema", "name": "apples", "schema": schema}},
    )
    assert Apples.model_validate_json(plain.output_text).unit
    async with client.responses.stream(
        model=catalog.profile(protocol), input="2+2 in apples", text_format=Apples
    ) as stream:
        final = await stream.get_final_response()
    assert isinstance(final.output_parsed, Apples)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_idempotency_replays_and_refuses_another_body(
    client: AsyncOpenAI, catalog: Catalog, upstream: UpstreamServer, protocol: str
) -> None:
    key = f"resp-once-{uuid.uuid4().hex}"
    before = upstream.requests(catalog.model(protocol))
    body: Any = {
        "model": catalog.profile(protocol),
        "input": "only once",
        "extra_headers": {"Idempotency-Key": key},
    }
    one = await client.responses.create(**body)
    again = await client.responses.create(**body)
    async with client.responses.stream(**body) as stream:
        streamed = await stream.get_final_response()
    assert one.id == again.id == streamed.id
    assert one.output_text == again.output_text == streamed.output_text == "Echo: only once"
    assert one.usage == again.usage
    assert upstream.requests(catalog.model(protocol)) - before == 1
    with pytest.raises(openai.ConflictError) as conflict:
        await client.with_options(max_retries=3).responses.create(
            **{**body, "input": "something else"}
        )
    assert conflict.value.response.headers["x-should-retry"] == "false"
    assert upstream.requests(catalog.model(protocol)) - before == 1


async def test_a_run_follows_its_pinned_plan(
    client: AsyncOpenAI,
    http: httpx.AsyncClient,
    catalog: Catalog,
    temporal_client: Client,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    profile = f"pin-{catalog.tag}"
    first, second = catalog.deployment("anthropic"), f"sf/second-{catalog.tag}"
    await approved_deployment(
        http,
        catalog.auth,
        temporal_client,
        catalog.tenant,
        second,
        model=f"second-{catalog.tag}",
        endpointRef=upstream.endpoint_ref,
    )
    v1 = await publish(http, catalog.auth, profile_event(profile, [first], {}))
    assert v1.status_code == 200, v1.text
    run = str(uuid.uuid4())

    async def answered_by(run_id: str | None) -> str:
        headers = {"X-Run-Id": run_id} if run_id else {}
        raw = await client.responses.with_raw_response.create(
            model=profile, input="who answers", extra_headers=headers
        )
        async with sessions() as session:
            row = await session.get(
                InvocationReceiptRow, uuid.UUID(raw.headers["x-model-router-receipt-id"])
            )
        assert row is not None and row.deployment_id == raw.headers["x-model-router-deployment"]
        if run_id:
            assert str(row.run_id) == run_id and row.route_plan_id is not None
        return str(row.deployment_id)

    assert await answered_by(run) == first
    v2 = await publish(http, catalog.auth, profile_event(profile, [second], {}, version="2"))
    assert v2.status_code == 200, v2.text
    assert await answered_by(run) == first  # the run keeps the plan it started with
    assert await answered_by(str(uuid.uuid4())) == second
    assert await answered_by(None) == second


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_stream_cut_after_output_is_response_failed_and_partial(
    client: AsyncOpenAI,
    catalog: Catalog,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    protocol: str,
) -> None:
    upstream.register(
        catalog.model(protocol), lambda turn: Reply(text=" ".join(f"w{i}" for i in range(40)))
    )
    upstream.inject(catalog.model(protocol), Fault(kind=FaultKind.STREAM_CUT, after_chunks=6))
    key = f"resp-cut-{uuid.uuid4().hex}"
    kinds: list[str] = []
    seen = ""
    added: Any = None
    failed: Any = None
    try:
        async with client.responses.stream(
            model=catalog.profile(protocol),
            input="a long answer",
            extra_headers={"Idempotency-Key": key},
        ) as stream:
            async for event in stream:
                kinds.append(event.type)
                if event.type == "response.output_item.added":
                    added = event.item
                if event.type == "response.output_text.delta":
                    seen += event.delta
                if event.type == "response.failed":
                    failed = event
            with pytest.raises(RuntimeError, match=r"response\.completed"):
                await stream.get_final_response()
    finally:
        upstream.register(catalog.model(protocol), default_responder)
    assert seen.startswith("w0")  # output had reached the caller
    assert kinds[-1] == "response.failed" and "response.completed" not in kinds
    assert failed.response.status == "failed"
    assert "stream_incomplete" in failed.response.error.message
    # Classified as on every surface's errors: a cut stream may succeed if asked again.
    assert (failed.response.error.model_extra or {}).get("errorClass") == "transient"
    # The item the deltas built, as it stood when the stream broke: `output: []` said nothing
    # had been answered, though the caller had the words and the receipt is Partial.
    [item] = failed.response.output
    assert (item.type, item.id, item.status) == ("message", added.id, "incomplete")
    assert failed.response.output_text == seen
    row = await receipt(sessions, catalog.tenant, key)
    assert row.outcome == "Partial"


async def test_a_stream_failing_after_output_says_the_kinds_code_and_the_counted_usage(
    client: AsyncOpenAI,
    catalog: Catalog,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """`response.failed` said `server_error` whatever failed, and `usage: null`: an overload
    (Anthropic's in-stream `overloaded_error`) is `overloaded`, as it is answered before any
    output (the next test), and the receipt (Partial) counts the output that reached the
    caller."""
    model, profile = catalog.model("anthropic"), catalog.profile("anthropic")
    upstream.register(model, lambda turn: Reply(text=" ".join(f"w{i}" for i in range(40))))
    upstream.inject(model, Fault(kind=FaultKind.STREAM_ERROR, after_chunks=8))
    key = f"resp-overloaded-{uuid.uuid4().hex}"
    failed: Any = None
    try:
        async with client.responses.stream(
            model=profile, input="a long answer", extra_headers={"Idempotency-Key": key}
        ) as stream:
            async for event in stream:
                if event.type == "response.failed":
                    failed = event
    finally:
        upstream.register(model, default_responder)
        upstream.state.clear_faults(model)
    assert failed is not None and "overloaded" in failed.response.error.message
    assert failed.response.error.code == "overloaded"
    row = await receipt(sessions, catalog.tenant, key)
    assert row.outcome == "Partial" and (row.output_tokens or 0) > 0
    usage = failed.response.usage
    assert usage is not None and usage.output_tokens == row.output_tokens
    assert usage.input_tokens == (row.input_tokens or 0)


@pytest.mark.parametrize(
    ("fault", "kind"),
    [
        (FaultKind.RATE_LIMIT, "rate_limit"),
        (FaultKind.CONTEXT_LENGTH, "context_length"),
        (FaultKind.OVERLOADED, "overloaded"),
        (FaultKind.AUTH, "auth"),
    ],
)
async def test_a_stream_failing_after_output_names_the_kind_as_a_whole_response_does(
    client: AsyncOpenAI,
    catalog: Catalog,
    upstream: UpstreamServer,
    fault: FaultKind,
    kind: str,
) -> None:
    """The code a whole response's error gives a kind (OpenAI's own, `rate_limit_exceeded`,
    `context_length_exceeded`, else the gateway's kind) is the one `response.failed` gives it,
    where it said `server_error`; most kinds the local upstream cannot fail with mid-stream."""
    upstream.inject(catalog.model("openai"), Fault(kind=fault))
    try:
        with pytest.raises(openai.APIStatusError) as whole:
            await client.responses.create(model=catalog.profile("openai"), input="fails")
    finally:
        upstream.state.clear_faults(catalog.model("openai"))
    writer = ResponseEvents(uuid.uuid4(), ResponsesIn(model="p", input="x"))
    writer.start()
    writer.add(TextDelta(text="partly"))
    summary = InvocationSummary(
        invocation_id=uuid.uuid4(), outcome=InvocationOutcome.PARTIAL, error_kind=kind
    )
    [line] = [x for x in (await writer.fail(summary)).split(b"\n") if x.startswith(b"data: ")]
    error = json.loads(line.removeprefix(b"data: "))["response"]["error"]
    assert whole.value.code not in (None, "server_error")
    assert error["code"] == whole.value.code


async def test_a_call_open_when_the_stream_fails_is_in_the_failed_response() -> None:
    """The call whose arguments were streaming, as far as they went, after the items done
    before it: `response.failed` listed only the items done."""
    writer = ResponseEvents(uuid.uuid4(), ResponsesIn(model="p", input="x"))
    writer.start()
    for event in (
        ToolCallDelta(index=0, id="c0", name="a", arguments_delta="{}"),
        TextDelta(text="and"),
        ToolCallDelta(index=1, id="c1", name="b", arguments_delta='{"y":'),
    ):
        writer.add(event)
    summary = InvocationSummary(
        invocation_id=uuid.uuid4(), outcome=InvocationOutcome.PARTIAL, deployment_id="d"
    )
    [line] = [x for x in (await writer.fail(summary)).split(b"\n") if x.startswith(b"data: ")]
    output = json.loads(line.removeprefix(b"data: "))["response"]["output"]
    assert [(i["type"], i.get("arguments"), i["status"]) for i in output] == [
        ("function_call", "{}", "completed"),
        ("message", None, "completed"),
        ("function_call", '{"y":', "incomplete"),
    ]


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_text_parts_of_a_message_reach_the_provider_apart(
    client: AsyncOpenAI, catalog: Catalog, protocol: str
) -> None:
    """A message's text parts are one text at the provider: joined end to end, "Context:" and
    "a.py" read "Context:a.py". The local upstream echoes the user's text as it got it."""
    parts: Any = [
        {"type": "input_text", "text": "Context:"},
        {"type": "input_text", "text": "a.py"},
    ]
    response = await client.responses.create(
        model=catalog.profile(protocol), input=[{"role": "user", "content": parts}]
    )
    assert response.output_text == "Echo: Context:\na.py"


async def test_a_budget_denial_reaches_no_provider(
    client: AsyncOpenAI, catalog: Catalog, upstream: UpstreamServer
) -> None:
    before = upstream.requests(catalog.model("anthropic"))
    with pytest.raises(openai.APIStatusError) as denied:
        await client.responses.create(
            model=catalog.profile("anthropic"),
            input="on a budget",
            extra_headers={"X-Budget-Usd": "0.000001"},  # under the worst case
        )
    assert denied.value.status_code == 402
    assert denied.value.response.headers["x-model-router-receipt-id"]
    assert upstream.requests(catalog.model("anthropic")) == before
    fits = await client.responses.create(
        model=catalog.profile("anthropic"),
        input="on a budget",
        extra_headers={"X-Budget-Usd": "100"},
    )
    assert fits.output_text == "Echo: on a budget"
    assert upstream.requests(catalog.model("anthropic")) == before + 1


async def test_max_output_tokens_makes_an_incomplete_response(
    client: AsyncOpenAI, catalog: Catalog
) -> None:
    cut = await client.responses.create(
        model=catalog.profile("openai"),
        input="one two three four five six seven",
        max_output_tokens=2,
    )
    assert cut.status == "incomplete"
    assert cut.incomplete_details is not None
    assert cut.incomplete_details.reason == "max_output_tokens"


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_call_cut_by_max_output_tokens_is_an_incomplete_item(
    client: AsyncOpenAI, catalog: Catalog, upstream: UpstreamServer, protocol: str
) -> None:
    """Marked "completed" with half its arguments, agents ran the call as if whole."""
    cut = ToolCallReply(name="get_weather", arguments='{"city": "Par')
    upstream.register(
        catalog.model(protocol),
        lambda turn: Reply(text="Looking.", tool_calls=[cut], finish_reason="length"),
    )
    ask: Any = {"model": catalog.profile(protocol), "input": "weather?", "tools": [WEATHER]}
    try:
        whole = await client.responses.create(**ask)
        streamed: Any = None
        async with client.responses.stream(**ask) as stream:
            async for event in stream:  # the SDK's final response needs response.completed
                if event.type == "response.incomplete":
                    streamed = event.response
    finally:
        upstream.register(catalog.model(protocol), default_responder)
    for response in (whole, streamed):
        assert response.status == "incomplete"
        items: list[Any] = list(response.output)
        assert [(i.type, i.status) for i in items] == [
            ("message", "completed"),
            ("function_call", "incomplete"),
        ]


async def _streamed(*events: TextDelta | ToolCallDelta | Finish) -> list[dict[str, Any]]:
    """A Responses stream of these normalised events, ended Completed: its events' data."""
    writer = ResponseEvents(uuid.uuid4(), ResponsesIn(model="p", input="x"))
    streamed = writer.start() + b"".join(writer.add(event) for event in events)
    summary = InvocationSummary(
        invocation_id=uuid.uuid4(), outcome=InvocationOutcome.COMPLETED, deployment_id="d"
    )
    streamed += await writer.end(summary)
    return [
        json.loads(line.removeprefix(b"data: "))
        for line in streamed.split(b"\n")
        if line.startswith(b"data: ")
    ]


async def test_a_tool_name_on_a_later_fragment_reaches_the_stream() -> None:
    """Some servers send a call's id first and its name after: the stream kept the first
    fragment's empty name, while the receipt's answer took the later one."""
    done = await _streamed(
        ToolCallDelta(index=0, id="call_1", name=None, arguments_delta=""),
        ToolCallDelta(index=0, name="get_weather", arguments_delta="{}"),
        Finish(reason=FinishReason.TOOL_CALLS),
    )
    [item] = [e["item"] for e in done if e["type"] == "response.output_item.done"]
    assert (item["name"], item["status"]) == ("get_weather", "completed")


async def test_each_item_is_done_before_the_next_is_added() -> None:
    """Parallel calls whose fragments interleave, then text: call 0 stayed open to the end,
    after message 1 was added and done, where runtimes acting on `output_item.done` expect
    each item done before the next (as OpenAI sends them). A call begun while another
    streams is now sent whole once that one is done."""
    sent = await _streamed(
        ToolCallDelta(index=0, id="c0", name="a", arguments_delta='{"x":'),
        ToolCallDelta(index=1, id="c1", name="b", arguments_delta='{"y":'),
        ToolCallDelta(index=0, arguments_delta="1}"),
        ToolCallDelta(index=1, arguments_delta="2}"),
        TextDelta(text="done"),
        Finish(reason=FinishReason.STOP),
    )
    order = [
        (e["type"].rsplit(".", 1)[-1], e["output_index"])
        for e in sent
        if e["type"] in ("response.output_item.added", "response.output_item.done")
    ]
    assert order == [
        ("added", 0),
        ("done", 0),
        ("added", 1),
        ("done", 1),
        ("added", 2),
        ("done", 2),
    ]
    calls = [e["item"] for e in sent if e["type"] == "response.output_item.done"][:2]
    assert [(c["name"], c["arguments"]) for c in calls] == [("a", '{"x":1}'), ("b", '{"y":2}')]
    final = sent[-1]["response"]["output"]
    assert [i["type"] for i in final] == ["function_call", "function_call", "message"]


async def test_the_final_response_holds_a_calls_late_fragments_and_id() -> None:
    """A call closed when text began still takes what comes after for it, as the receipt's
    answer does, and a provider's id sent after the first fragment replaces ours."""
    sent = await _streamed(
        ToolCallDelta(index=0, name="a", arguments_delta='{"x":'),
        TextDelta(text="between"),
        ToolCallDelta(index=0, id="call_real", arguments_delta="1}"),
        Finish(reason=FinishReason.TOOL_CALLS),
    )
    final = sent[-1]["response"]["output"]
    assert [(i["type"], i.get("call_id"), i.get("arguments")) for i in final] == [
        ("function_call", "call_real", '{"x":1}'),
        ("message", None, None),
    ]


def test_a_whole_answer_cut_in_its_text_after_calls_marks_the_text() -> None:
    """Text first, calls after, the last call marked cut: an answer that ended in its text
    (cut there) had a whole call marked incomplete, which agents do not run."""
    call = ToolCall(id="c1", name="a", arguments='{"x":1}')
    cut = Completion(
        text="and then", tool_calls=(call,), finish_reason=FinishReason.LENGTH, ends_in_text=True
    )
    items = output_items(uuid.uuid4(), cut)
    assert [(i["type"], i["status"]) for i in items] == [
        ("function_call", "completed"),
        ("message", "incomplete"),
    ]


async def test_what_cannot_be_served_statelessly_or_mapped_is_refused(
    client: AsyncOpenAI, catalog: Catalog, http: httpx.AsyncClient
) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        await client.responses.create(model="no-such-profile", input="x")
    missing_body: Any = missing.value.body
    assert missing_body["param"] == "model", missing_body  # where OpenAI's clients look
    # OpenAI's own words for a model it does not serve, as on Chat Completions.
    assert (missing.value.code, missing_body["type"]) == (
        "model_not_found",
        "invalid_request_error",
    )
    image: Any = {"type": "input_image", "image_url": "https://example.com/a.png"}
    for kwargs, param in (
        ({"previous_response_id": "resp_123"}, "previous_response_id"),
        ({"store": True}, "store"),
        ({"top_p": 0.5}, "top_p"),
        ({"reasoning": {"effort": "high"}}, "reasoning"),
        ({"tools": [{"type": "web_search"}]}, "tools.0"),
        ({"input": [{"role": "user", "content": [image]}]}, "input.0.content.0.type"),
        ({"input": [{"type": "reasoning", "summary": []}]}, "input.0.type"),
        # Chat Completions' fields, unknown here: dropped, the answer was neither shaped nor
        # capped.
        ({"extra_body": {"response_format": {"type": "json_object"}}}, "response_format"),
        ({"extra_body": {"max_tokens": 5}}, "max_tokens"),
        ({"extra_body": {"max_tokens": 5, "zz_unknown": 1}}, "max_tokens"),  # the first, sorted
        # A part's type that is no string: looked up in a set, it was a 500.
        ({"input": [{"role": "user", "content": [{"type": ["x"], "text": "hi"}]}]}, "input.0"),
    ):
        request: Any = {"model": catalog.profile("openai"), "input": "x", **kwargs}
        with pytest.raises(openai.BadRequestError) as refused:
            await client.responses.create(**request)
        error: Any = refused.value.body
        assert str(error["param"]).startswith(param), error
        assert error["type"] == "invalid_request_error"
        problem = refused.value.response.json()  # its problem members say the same status
        assert (problem["status"], problem["title"]) == (400, "Bad Request"), problem
    # A field sent as null asks for nothing (clients that serialise unset options so).
    nulls: Any = {"previous_response_id": None, "top_p": None, "zz_unknown": None}
    taken = await client.responses.create(
        model=catalog.profile("openai"), input="x", extra_body=nulls
    )
    assert taken.status == "completed"
    # Refused before any route reads the body (too deep): OpenAI's error member all the same.
    deep = await http.post(
        "/v1/responses",
        content=b'{"model": "x", "input": ' + b"[" * 100 + b"]" * 100 + b"}",
        headers={**catalog.auth, "content-type": "application/json"},
    )
    assert deep.status_code == 400 and deep.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("field", ["defer_loading", "allowed_callers", "output_schema", "zz"])
async def test_a_function_tools_unknown_fields_are_refused(
    client: AsyncOpenAI, catalog: Catalog, field: str
) -> None:
    """Accepted and dropped, then echoed in `tools` as if honoured: a deferred tool was sent
    to the model whole, an output schema never checked."""
    values: dict[str, Any] = {
        "defer_loading": True,
        "allowed_callers": ["code_interpreter"],
        "output_schema": {"type": "object"},
        "zz": 1,
    }
    tool: Any = {**WEATHER, field: values[field]}
    with pytest.raises(openai.BadRequestError) as refused:
        await client.responses.create(model=catalog.profile("openai"), input="x", tools=[tool])
    error: Any = refused.value.body
    assert (error["param"], error["type"]) == (f"tools.0.{field}", "invalid_request_error")
    # Sent as null it asks for nothing, as elsewhere on this surface.
    nulled: Any = {**WEATHER, field: None}
    taken = await client.responses.create(
        model=catalog.profile("openai"), input="x", tools=[nulled]
    )
    assert taken.status == "completed" and getattr(taken.tools[0], field, None) is None


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"text": {"format": {"type": "json_object", "zz": 1}}}, "text.format.zz"),
        ({"text": {"zz": 1}}, "text.zz"),
        ({"tool_choice": {"type": "function", "name": "get_weather", "zz": 1}}, "tool_choice.zz"),
    ],
    ids=["text.format", "text", "tool_choice"],
)
async def test_unknown_keys_of_nested_objects_are_refused(
    client: AsyncOpenAI, catalog: Catalog, extra: dict[str, Any], param: str
) -> None:
    """Taken and dropped (and `text` echoed back as if honoured), as top-level ones are not."""
    with pytest.raises(openai.BadRequestError) as refused:
        await client.responses.create(
            model=catalog.profile("openai"), input="json", tools=[WEATHER], extra_body=extra
        )
    error: Any = refused.value.body
    assert (error["param"], error["type"]) == (param, "invalid_request_error"), error


@pytest.mark.parametrize(
    "item",
    [{"id": "msg_123"}, {"type": "item_reference", "id": "msg_123"}],
    ids=["without-type", "explicit"],
)
async def test_an_item_reference_is_refused_as_needing_stored_state(
    client: AsyncOpenAI, catalog: Catalog, item: dict[str, Any]
) -> None:
    """A reference (its `type` optional in the SDK) was refused for its missing `role`, or
    as an item that cannot be mapped: neither said why no reference can be resolved here."""
    request: Any = [item]
    with pytest.raises(openai.BadRequestError) as refused:
        await client.responses.create(model=catalog.profile("openai"), input=request)
    error: Any = refused.value.body
    assert error["param"] == "input.0", error
    assert "stateless" in error["message"] and "stored" in error["message"], error


async def test_stream_null_asks_for_a_whole_response(client: AsyncOpenAI, catalog: Catalog) -> None:
    # The SDK's non-stream overload types `stream` as Optional; null was a 400.
    whole = await client.responses.create(
        model=catalog.profile("openai"), input="not streamed", stream=None
    )
    assert (whole.status, whole.output_text) == ("completed", "Echo: not streamed")


async def test_text_formats_description_reaches_the_provider(
    client: AsyncOpenAI, catalog: Catalog, upstream: UpstreamServer
) -> None:
    # It tells the model what the output is for; it was accepted and dropped.
    sent: list[Any] = []

    def record(turn: ChatTurn) -> Reply:
        sent.append(turn.raw["response_format"]["json_schema"].get("description"))
        return Reply(text='{"city": "Paris"}')

    upstream.register(catalog.model("openai"), record)
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    given = {"type": "json_schema", "name": "x", "schema": schema, "description": "a city"}
    try:
        answer = await client.responses.create(
            model=catalog.profile("openai"), input="json", text={"format": cast(Any, given)}
        )
    finally:
        upstream.register(catalog.model("openai"), default_responder)
    assert sent == ["a city"]
    assert answer.output_text == '{"city": "Paris"}'


async def test_cache_writes_are_reported_whole_and_streamed(
    client: AsyncOpenAI, catalog: Catalog, sessions: async_sessionmaker[AsyncSession]
) -> None:
    """An Anthropic deployment writes the history to its prompt cache (the adapter's
    breakpoint) and bills those tokens dearer: `cache_write_tokens` was always 0."""

    def history() -> Any:
        return [
            {"role": "user", "content": f"first {uuid.uuid4().hex}"},  # nothing cached yet
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "second"},
        ]

    ask: Any = {"model": catalog.profile("anthropic"), "instructions": "A stable prompt."}
    keyed: Any = {**ask, "input": history()}
    keyed["extra_headers"] = {"Idempotency-Key": f"resp-cache-{uuid.uuid4().hex}"}
    whole = await client.responses.create(**keyed)
    async with client.responses.stream(**ask, input=history()) as stream:
        streamed = await stream.get_final_response()
    row = await receipt(sessions, catalog.tenant, keyed["extra_headers"]["Idempotency-Key"])
    _usage_matches(whole.usage, row)  # written tokens are inside input_tokens, as OpenAI's
    for response in (whole, streamed):
        assert response.usage is not None
        details = response.usage.input_tokens_details
        assert 0 < details.cache_write_tokens <= response.usage.input_tokens, response.usage
    # A replay, from the receipt, which keeps the count of cache writes: as the live answer.
    assert whole.usage is not None
    assert row.cache_write_input_tokens == whole.usage.input_tokens_details.cache_write_tokens
    again = await client.responses.create(**keyed)
    assert again.usage == whole.usage


@pytest.mark.parametrize(
    ("fault", "status", "retry"),
    [
        (FaultKind.CONTENT_POLICY, 400, "false"),
        (FaultKind.AUTH, 502, "false"),
        (FaultKind.UNAVAILABLE, 503, None),
    ],
)
async def test_provider_failures_keep_the_sdks_retry_logic_right(
    client: AsyncOpenAI,
    catalog: Catalog,
    upstream: UpstreamServer,
    fault: FaultKind,
    status: int,
    retry: str | None,
) -> None:
    upstream.inject(catalog.model("anthropic"), Fault(kind=fault))
    try:
        with pytest.raises(openai.APIStatusError) as failed:
            async with client.responses.stream(
                model=catalog.profile("anthropic"), input="fails before output"
            ) as stream:
                await stream.get_final_response()
    finally:
        upstream.state.clear_faults(catalog.model("anthropic"))
    error = failed.value
    assert error.status_code == status
    body: Any = error.body
    assert body["message"].startswith("model call failed") and body["type"] == error.code
    assert error.response.headers.get("x-should-retry") == retry
    assert error.response.headers["x-model-router-receipt-id"]
    if status == 503:
        assert int(error.response.headers["retry-after"]) >= 1


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_context_overflow_is_named_as_openai_names_it(
    client: AsyncOpenAI, catalog: Catalog, upstream: UpstreamServer, protocol: str
) -> None:
    # Codex and the Agents SDK compact the conversation on `context_length_exceeded`; under
    # the gateway's own name (`context_length`) they stopped.
    upstream.inject(catalog.model(protocol), Fault(kind=FaultKind.CONTEXT_LENGTH))
    key = {"Idempotency-Key": f"too-long-{uuid.uuid4().hex}"}
    try:
        with pytest.raises(openai.BadRequestError) as failed:
            await client.responses.create(model=catalog.profile(protocol), input="too long")
        with pytest.raises(openai.BadRequestError) as chat:
            await client.chat.completions.create(
                model=catalog.profile(protocol),
                messages=[{"role": "user", "content": "long"}],
                extra_headers=key,
            )
    finally:
        upstream.state.clear_faults(catalog.model(protocol))
    # A runtime that keys its steps and runs one again gets the same answer from the receipt:
    # replayed as the provider's failure (a 502), the overflow was nothing an agent acts on.
    with pytest.raises(openai.BadRequestError) as replayed:
        await client.chat.completions.create(
            model=catalog.profile(protocol),
            messages=[{"role": "user", "content": "long"}],
            extra_headers=key,
        )
    assert replayed.value.response.json()["closeReason"] == "context-length"
    for error in (failed.value, chat.value, replayed.value):
        assert (error.code, error.type) == ("context_length_exceeded", "invalid_request_error")


def test_an_answer_remembers_it_ended_in_text_and_its_replay_streams_so() -> None:
    """Whether text came after the calls is the answer's own (folded from its events), and a
    replay on any surface streams the items in that order, so where a cut fell is the same
    item again."""
    call = ToolCallDelta(index=0, id="c1", name="a", arguments_delta="{}")
    text, cut = TextDelta(text="and then"), Finish(reason=FinishReason.LENGTH)
    done = collect_events([call, text, cut])
    assert done.ends_in_text
    assert not collect_events([text, call, cut]).ends_in_text
    assert not collect_events([text, cut]).ends_in_text  # no calls
    replayed = replay_events(Replayed(output=done.model_dump_json().encode()))
    assert [type(e).__name__ for e in replayed] == ["ToolCallDelta", "TextDelta", "Finish"]
