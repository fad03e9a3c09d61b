"""A tool call whose arguments are no JSON object, from an OpenAI-compatible deployment (its
arguments are the model's own text), through the Messages surface, whose `tool_use.input` is an
object: answered whole it was `input: {}` (the agent ran the tool with no arguments), a list as
is, or a 500 for NaN or 1e400; streamed, the anthropic SDK raised a ValueError of its own
mid-stream. Now it is a 502 `api_error` answered whole, and an `error` event ending the stream,
with nothing of the call sent past what still read; a call cut short (at max_tokens) is read as
the SDK reads a streamed one, keeping its whole members."""

from __future__ import annotations

import uuid
from typing import Any

import anthropic
import httpx
import pytest
from anthropic import AsyncAnthropic
from temporalio.client import Client

from providers.upstream import UpstreamServer
from providers.upstream.turn import ChatTurn, Reply, ToolCallReply
from tests.conftest import TokenFactory
from tests.helpers.catalog import simulated_profile

PROFILE, MODEL = "tool-input", "tool-input-sim"
BASH: Any = {"name": "bash", "input_schema": {"type": "object", "properties": {}}}


CUT = "CUT:"
# Before arguments that are whitespace alone: a message of no text is refused on /v1/messages.
ARGUMENTS = "ARGUMENTS:"


def _arguments_said(turn: ChatTurn) -> Reply:
    """Calls `bash` with the user's words as its arguments, exactly as written (after
    `ARGUMENTS:`, those after it); after `CUT:`, ended as an answer cut at max_tokens is."""
    said = turn.last_user_text.removeprefix(ARGUMENTS)
    if said.startswith(CUT):
        call = ToolCallReply(name="bash", arguments=said.removeprefix(CUT))
        return Reply(tool_calls=[call], finish_reason="length")
    return Reply(tool_calls=[ToolCallReply(name="bash", arguments=said)])


@pytest.fixture
async def client(
    api_url: str,
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
) -> AsyncAnthropic:
    token = await token_for(tenant)
    await simulated_profile(
        http, token, temporal_client, tenant, upstream, PROFILE, MODEL, _arguments_said
    )
    return AsyncAnthropic(base_url=api_url, api_key=token, max_retries=0)


def _call(arguments: str) -> dict[str, Any]:
    return {
        "model": PROFILE,
        "max_tokens": 300,
        "messages": [{"role": "user", "content": arguments}],
        "tools": [BASH],
    }


@pytest.mark.parametrize(
    "arguments",
    [
        "{'cmd': 'ls'}",
        "[1]",
        '{"n": NaN}',
        # Too large for a float: jiter reads it as inf (allow_inf_nan=False or not), and the
        # whole answer could not be rendered: a 500, which the SDK retried (more billed calls).
        '{"n": 1e400}',
        '{"cmd": "ls", "n": [-1e400]}',
        "cmd=ls",
        '{"cmd": "ls"} and more',  # junk after the object (each prefix reads partially)
        '{"cmd": "ls"}{"cmd": "pwd"}',  # two calls run together by a server
        '{"path": "a.py", "content": "x = ',  # cut short, though not at max_tokens
    ],
)
async def test_arguments_that_are_no_object_are_an_api_error_whole_and_streamed(
    client: AsyncAnthropic, arguments: str
) -> None:
    with pytest.raises(anthropic.APIStatusError) as whole:
        await client.messages.create(**_call(arguments))
    assert whole.value.status_code == 502
    body: Any = whole.value.body
    assert body["error"]["type"] == "api_error"
    assert "'bash'" in body["error"]["message"]
    assert body["receiptId"] and body["outcome"] == "Completed"  # the provider did answer

    seen: list[Any] = []
    with pytest.raises(anthropic.APIStatusError) as streamed:  # never the SDK's ValueError
        async with client.messages.stream(**_call(arguments)) as stream:
            async for event in stream:
                seen.append(event)
    assert "'bash'" in str(streamed.value)
    sent = "".join(
        e.delta.partial_json
        for e in seen
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    )
    assert arguments[: len(sent)] == sent


async def test_a_keyed_call_answered_so_is_told_its_key_only_replays_it(
    client: AsyncAnthropic, upstream: UpstreamServer
) -> None:
    """Unkeyed, another try is a new call that may be answered well: the SDK retries it. With
    a key, a retry replays the same answer and the same 502 for good: the SDK's retries were
    replays, nothing telling the caller to take a new key."""
    key = {"Idempotency-Key": f"ti-{uuid.uuid4().hex}"}
    before = upstream.requests(MODEL)
    for attempt in range(2):  # the call, then its key sent again: a replay
        with pytest.raises(anthropic.APIStatusError) as refused:
            await client.messages.create(**_call("[1]"), extra_headers=key)
        assert refused.value.status_code == 502, attempt
        assert refused.value.response.headers["x-should-retry"] == "false", attempt
        assert "new Idempotency-Key" in str(refused.value), attempt
    with pytest.raises(anthropic.APIStatusError) as unkeyed:
        await client.messages.create(**_call("[1]"))
    assert "x-should-retry" not in unkeyed.value.response.headers
    assert upstream.requests(MODEL) == before + 2  # the replay called nothing


async def test_a_long_call_streams_whole_and_one_cut_short_keeps_its_whole_members(
    client: AsyncAnthropic,
) -> None:
    long = '{"path": "a.py", "content": "' + "x = 1\\n" * 4000 + '"}'
    async with client.messages.stream(**_call(long)) as stream:
        final = await stream.get_final_message()
    [block] = final.content
    assert block.type == "tool_use" and block.input == {"path": "a.py", "content": "x = 1\n" * 4000}

    cut = CUT + '{"path": "a.py", "content": "x = '  # ended at max_tokens
    answered = await client.messages.create(**_call(cut))
    assert answered.stop_reason == "max_tokens"
    [block] = answered.content
    assert block.type == "tool_use" and block.input == {"path": "a.py"}
    async with client.messages.stream(**_call(cut)) as stream:
        final = await stream.get_final_message()
    assert final.content[0].type == "tool_use" and final.content[0].input == {"path": "a.py"}


async def test_blank_arguments_are_the_empty_object(client: AsyncAnthropic) -> None:
    """A call with only whitespace for arguments (as some servers stream a first fragment) is
    a call with none: `{}`, not an error."""
    answered = await client.messages.create(**_call(f"{ARGUMENTS}  \n "))
    [block] = answered.content
    assert block.type == "tool_use" and block.input == {}
    async with client.messages.stream(**_call(f"{ARGUMENTS}  \n ")) as stream:
        final = await stream.get_final_message()
    assert final.content[0].type == "tool_use" and final.content[0].input == {}


async def test_a_blank_first_fragment_before_the_json_streams_as_one_delta(
    client: AsyncAnthropic,
) -> None:
    """A server that streams whitespace before a call's JSON (the simulator sends it as a
    fragment of its own): held back, it was then sent as a delta by itself, and the SDK, which
    parses its buffer after each delta, raised `Unable to parse tool parameter JSON`."""
    arguments = " " * 12 + '{"cmd": "ls"}'  # the simulator's fragments are 12 characters
    async with client.messages.stream(**_call(arguments)) as stream:
        final = await stream.get_final_message()
    assert final.content[0].type == "tool_use" and final.content[0].input == {"cmd": "ls"}
