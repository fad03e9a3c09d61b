"""Output a surface holds back keeps no stream silent for long. On Messages a parallel tool
call's fragments wait for the message's end (a content block is sent whole once the one before
it closed), while the provider goes on generating them; an OpenAI-protocol deployment sends no
keep-alive of its own, so the caller heard nothing, and a proxy that cuts a connection idle for
60 s (nginx, an AWS load balancer) cut long parallel file writes. The relay now sends the
surface's keep-alive (Messages: `ping`) once held output has kept the stream silent for
`HELD_KEEP_ALIVE_SECONDS` (15 s; a fraction of a second here), and the SDK's own stream helper
still puts both calls together whole."""

from __future__ import annotations

import json
from typing import Any

import pytest
from anthropic import AsyncAnthropic

from api import wire
from providers.upstream import Reply, UpstreamServer
from providers.upstream.responders import ToolCallReply, fixed
from tests.conftest import TokenFactory
from tests.helpers.surfaces import Catalog

# Two calls of 600 characters of arguments each: the second's 50 fragments (12 characters each)
# come 20 ms apart from the simulator, a second at least during which Messages holds them.
ARGUMENTS = {"a": {"text": "x" * 600}, "b": {"text": "y" * 600}}
TOOLS: Any = [
    {
        "name": name,
        "description": f"tool {name}",
        "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}},
    }
    for name in ARGUMENTS
]
ASK: Any = {"role": "user", "content": "write both files"}


async def test_a_stream_held_back_for_a_parallel_tool_call_hears_pings_and_stays_whole(
    api_url: str,
    token_for: TokenFactory,
    catalog: Catalog,
    upstream: UpstreamServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(wire, "HELD_KEEP_ALIVE_SECONDS", 0.2)
    model = catalog.model("openai")
    calls = [ToolCallReply(name=name, arguments=args) for name, args in ARGUMENTS.items()]
    upstream.register(model, fixed(Reply(tool_calls=calls)))
    upstream.state.configure(model, chunk_delay=0.02)
    request: Any = {
        "model": catalog.profile("openai"),
        "max_tokens": 2000,
        "messages": [ASK],
        "tools": TOOLS,
    }
    async with AsyncAnthropic(
        base_url=api_url, api_key=await token_for(catalog.tenant), max_retries=0
    ) as client:
        async with client.messages.with_streaming_response.create(
            **request, stream=True
        ) as response:
            names = [
                line.removeprefix("event: ")
                async for line in response.iter_lines()
                if line.startswith("event: ")
            ]
        # The second call's block opened only once the message ended: pings came while it was
        # held (the one after `message_start` is the Messages API's own, always sent).
        first, second = [i for i, n in enumerate(names) if n == "content_block_start"]
        assert "ping" in names[first:second], names
        assert names[-1] == "message_stop"
        async with client.messages.stream(**request) as stream:
            message = await stream.get_final_message()
    said = {b.name: b.input for b in message.content if b.type == "tool_use"}
    assert json.dumps(said, sort_keys=True) == json.dumps(ARGUMENTS, sort_keys=True)
