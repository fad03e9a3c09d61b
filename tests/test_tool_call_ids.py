"""Tool-call ids: a call its provider sent without one (some OpenAI-compatible servers) gets an
id where it is read, so the live stream, the answer built from it and its replay say the same,
and no two calls of a session share one (numbered per answer, every turn's first call was
`call_0`; a streamed Chat Completions call had no id at all). An id with characters Anthropic
does not take (`functions.bash:0`) is mapped for an Anthropic deployment, in the call and its
result alike: a session's next turn sent there was refused."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from anthropic import AsyncAnthropic
from openai import AsyncOpenAI
from temporalio.client import Client

from providers.upstream import UpstreamServer
from providers.upstream.faults import Fault, FaultKind
from providers.upstream.turn import ChatTurn, Reply, ToolCallReply
from tests.conftest import TokenFactory
from tests.helpers.catalog import approved_profile

OPENAI_MODEL, ANTHROPIC_MODEL = "ids-openai-sim", "ids-anthropic-sim"
TOOL: Any = {
    "type": "function",
    "function": {"name": "bash", "parameters": {"type": "object", "properties": {}}},
}


def _two_calls(turn: ChatTurn) -> Reply:
    if turn.last.role == "tool":
        return Reply(text="done")
    return Reply(
        tool_calls=[
            ToolCallReply(name="bash", arguments={"cmd": "ls"}),
            ToolCallReply(name="bash", arguments={"cmd": "pwd"}),
        ]
    )


@pytest.fixture
async def profiles(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
) -> tuple[str, str]:
    upstream.register(OPENAI_MODEL, _two_calls)
    upstream.register(ANTHROPIC_MODEL, _two_calls)
    upstream.inject(OPENAI_MODEL, Fault(kind=FaultKind.NO_TOOL_CALL_IDS))
    token = await token_for(tenant)
    auth = {"Authorization": f"Bearer {token}"}
    run = uuid.uuid4().hex[:6]
    ref = upstream.endpoint_ref
    await approved_profile(
        http, auth, temporal_client, tenant, "ids-openai",
        {f"ids/o{run}": {"endpointRef": ref, "model": OPENAI_MODEL}},
    )  # fmt: skip
    await approved_profile(
        http, auth, temporal_client, tenant, "ids-anthropic",
        {f"ids/a{run}": {"provider": "anthropic", "endpointRef": ref, "model": ANTHROPIC_MODEL}},
    )  # fmt: skip
    return token, tenant


async def test_calls_sent_without_ids_get_unique_ids_that_a_replay_repeats(
    api_url: str, profiles: tuple[str, str]
) -> None:
    token, _ = profiles
    sdk = AsyncOpenAI(base_url=f"{api_url}/v1", api_key=token, max_retries=0)
    ask: Any = {
        "model": "ids-openai",
        "messages": [{"role": "user", "content": "list"}],
        "tools": [TOOL],
    }
    key = {"Idempotency-Key": uuid.uuid4().hex}
    whole = await sdk.chat.completions.create(**ask, extra_headers=key)
    calls = whole.choices[0].message.tool_calls or []
    ids = [c.id for c in calls]
    assert len(ids) == 2 and all(ids) and len(set(ids)) == 2
    again = await sdk.chat.completions.create(**ask)  # another answer: other ids
    assert not {c.id for c in again.choices[0].message.tool_calls or []} & set(ids)
    replayed = await sdk.chat.completions.create(**ask, extra_headers=key)
    assert [c.id for c in replayed.choices[0].message.tool_calls or []] == ids

    streamed_key = {"Idempotency-Key": uuid.uuid4().hex}
    async with sdk.chat.completions.stream(**ask, extra_headers=streamed_key) as stream:
        live = await stream.get_final_completion()
    live_ids = [c.id for c in live.choices[0].message.tool_calls or []]
    assert len(live_ids) == 2 and all(live_ids) and len(set(live_ids)) == 2
    # The stored answer a replay reads holds the ids the live stream sent.
    replay = await sdk.chat.completions.create(**ask, extra_headers=streamed_key)
    assert [c.id for c in replay.choices[0].message.tool_calls or []] == live_ids

    # The session goes on with those ids: the results are matched to the calls.
    follow = [
        *ask["messages"],
        whole.choices[0].message.model_dump(exclude_none=True),
        *({"role": "tool", "tool_call_id": i, "content": "ok"} for i in ids),
    ]
    done = await sdk.chat.completions.create(**{**ask, "messages": follow})
    assert done.choices[0].message.content == "done"
    await sdk.close()


async def test_an_id_anthropic_does_not_take_is_mapped_for_an_anthropic_deployment(
    api_url: str, profiles: tuple[str, str]
) -> None:
    token, _ = profiles
    sdk = AsyncOpenAI(base_url=f"{api_url}/v1", api_key=token, max_retries=0)
    history: Any = [
        {"role": "user", "content": "list"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "functions.bash:0",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"cmd": "ls"}'},
                },
                # Mapped alike but for a digest of each: two ids stay two.
                {
                    "id": "functions.bash.0",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"cmd": "pwd"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "functions.bash:0", "content": "a.py"},
        {"role": "tool", "tool_call_id": "functions.bash.0", "content": "/"},
    ]
    done = await sdk.chat.completions.create(model="ids-anthropic", messages=history, tools=[TOOL])
    assert done.choices[0].message.content == "done"
    await sdk.close()
    messages = AsyncAnthropic(base_url=api_url, api_key=token, max_retries=0)
    answer = await messages.messages.create(
        model="ids-anthropic",
        max_tokens=100,
        messages=[
            {"role": "user", "content": "list"},
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "tool_use",
                        "id": "functions.bash:0",
                        "name": "bash",
                        "input": {"cmd": "ls"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "functions.bash:0", "content": "a.py"}
                ],
            },
        ],
        tools=[{"name": "bash", "input_schema": {"type": "object", "properties": {}}}],
    )
    assert answer.content[0].type == "text"
    await messages.close()
