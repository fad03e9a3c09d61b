"""The Messages stream's blocks come one after another, whatever order the upstream's fragments
arrive in: each block stops before the next starts, and every block's content is whole. The
TypeScript SDK's `contentBlock` event reports the snapshot's last block at each stop, so blocks
left open together (parallel tool calls, text after tools) were reported as the wrong ones."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest

from api.anthropic_answers import message_body
from api.anthropic_stream import MessageEvents
from api.invocation_events import Replayed
from api.wire import replay_events
from domain.enums import InvocationOutcome, UsageStatus
from domain.invocation import InvocationSummary
from providers.completion_fold import collect_events
from providers.types import Finish, FinishReason, TextDelta, ToolCallDelta


def _events(raw: bytes) -> list[dict[str, Any]]:
    out = []
    for frame in raw.decode().split("\n\n"):
        data = [line[6:] for line in frame.splitlines() if line.startswith("data: ")]
        if data:
            out.append(json.loads(data[0]))
    return out


def _summary(invocation: uuid.UUID) -> InvocationSummary:
    return InvocationSummary(
        invocation_id=invocation,
        outcome=InvocationOutcome.COMPLETED,
        usage_status=UsageStatus.REPORTED,
        deployment_id="d",
        input_tokens=1,
        output_tokens=2,
    )


def _stream(parts: list[TextDelta | ToolCallDelta | Finish]) -> list[dict[str, Any]]:
    invocation = uuid.uuid4()
    writer = MessageEvents(invocation, "code-agent")
    raw = writer.start() + b"".join(writer.add(p) for p in parts)
    return _events(raw + asyncio.run(writer.end(_summary(invocation))))


def _blocks(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The message's content as a client rebuilds it, checking that blocks never overlap."""
    blocks: list[dict[str, Any]] = []
    open_index: int | None = None
    for e in events:
        if e["type"] == "content_block_start":
            assert open_index is None, f"block {e['index']} starts while {open_index} is open"
            assert e["index"] == len(blocks)
            open_index = e["index"]
            blocks.append({**e["content_block"], "json": ""})
        elif e["type"] == "content_block_delta":
            assert e["index"] == open_index, "a delta for a block that is not the open one"
            delta, block = e["delta"], blocks[e["index"]]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            else:
                block["json"] += delta["partial_json"]
        elif e["type"] == "content_block_stop":
            assert e["index"] == open_index
            open_index = None
    assert open_index is None
    return [
        {"type": "text", "text": b["text"]}
        if b["type"] == "text"
        else {"type": "tool_use", "name": b["name"], "input": json.loads(b["json"] or "{}")}
        for b in blocks
    ]


def test_interleaved_parallel_tool_calls_and_text_after_them_come_one_block_at_a_time() -> None:
    parts: list[TextDelta | ToolCallDelta | Finish] = [
        TextDelta(text="Let me "),
        TextDelta(text="look."),
        ToolCallDelta(index=0, id="call_a", name="read", arguments_delta='{"path": '),
        ToolCallDelta(index=1, id="call_b", name="grep", arguments_delta='{"q": "x'),
        ToolCallDelta(index=0, arguments_delta='"a.py"}'),
        ToolCallDelta(index=2, id="call_c", name="ls", arguments_delta="{}"),
        ToolCallDelta(index=1, arguments_delta='"}'),
        TextDelta(text="Then more."),
        Finish(reason=FinishReason.TOOL_CALLS),
    ]
    events = _stream(parts)
    assert _blocks(events) == [
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "name": "read", "input": {"path": "a.py"}},
        {"type": "tool_use", "name": "grep", "input": {"q": "x"}},
        {"type": "tool_use", "name": "ls", "input": {}},
        {"type": "text", "text": "Then more."},
    ]
    kinds = [e["type"] for e in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert kinds.index("message_delta") > max(
        i for i, k in enumerate(kinds) if k == "content_block_stop"
    )


def test_a_plain_answer_and_sequential_tool_calls_stream_live() -> None:
    invocation = uuid.uuid4()
    writer = MessageEvents(invocation, "code-agent")
    writer.start()
    assert b"content_block_start" in writer.add(TextDelta(text="hi"))
    first = writer.add(ToolCallDelta(index=0, id="c0", name="a", arguments_delta="{}"))
    # The text stops as the first tool call starts, and that call streams at once.
    assert first.index(b"content_block_stop") < first.index(b"content_block_start")
    assert b"input_json_delta" in first
    # A second call while the first streams is held until the end.
    assert writer.add(ToolCallDelta(index=1, id="c1", name="b", arguments_delta="{}")) == b""


def test_a_held_call_whose_arguments_are_no_object_ends_the_stream_with_an_error() -> None:
    """The first call streams and is sent whole; the second, held behind it, is checked whole
    before it is sent, and is not: the stream ends with an `error` event, not a block the SDK
    cannot parse."""
    events = _stream(
        [
            ToolCallDelta(index=0, id="c0", name="read", arguments_delta='{"path": "a.py"}'),
            ToolCallDelta(index=1, id="c1", name="grep", arguments_delta="{'q': 'x'}"),
            Finish(reason=FinishReason.TOOL_CALLS),
        ]
    )
    starts = [e["content_block"]["name"] for e in events if e["type"] == "content_block_start"]
    assert starts == ["read"]
    assert events[-1]["type"] == "error" and events[-1]["error"]["type"] == "api_error"
    assert "'grep'" in events[-1]["error"]["message"]
    assert not any(e["type"] in ("message_delta", "message_stop") for e in events)


ORDERS = {
    "text-call": ["text", "tool_use"],
    "call-text": ["tool_use", "text"],
    "text-call-text": ["text", "tool_use", "text"],
}


@pytest.mark.parametrize("order", list(ORDERS))
def test_an_answer_given_whole_has_its_blocks_in_the_order_they_stream(order: str) -> None:
    """Text that came after the tool calls was put before them in an answer given whole, and
    text on both sides of a call was one block before it, though its stream (and a replay's)
    sent the blocks as they came."""
    parts: list[TextDelta | ToolCallDelta | Finish] = []
    calls = texts = 0
    for kind in order.split("-"):
        if kind == "call":
            arguments = f'{{"path": "{calls}.py"}}'
            parts.append(
                ToolCallDelta(index=calls, id=f"c{calls}", name="read", arguments_delta=arguments)
            )
            calls += 1
        else:
            parts.append(TextDelta(text=f"Run {texts}."))
            texts += 1
    parts.append(Finish(reason=FinishReason.TOOL_CALLS))
    invocation = uuid.uuid4()
    completion = collect_events(parts)
    whole = message_body(invocation, "code-agent", completion, _summary(invocation))
    given = [
        {"type": "text", "text": b["text"]}
        if b["type"] == "text"
        else {"type": "tool_use", "name": b["name"], "input": b["input"]}
        for b in whole["content"]
    ]
    assert given == _blocks(_stream(parts))
    assert [b["type"] for b in given] == ORDERS[order]
    # A replay of the stored answer streams the same blocks.
    stored = Replayed(output=completion.model_dump_json().encode())
    assert _blocks(_stream(replay_events(stored))) == given


def test_an_empty_text_delta_opens_no_block() -> None:
    """An Anthropic deployment's text_delta may be empty: after a call it opened an empty text
    block that the answer given whole and a replay (the fold) do not hold."""
    parts: list[TextDelta | ToolCallDelta | Finish] = [
        TextDelta(text="Run."),
        ToolCallDelta(index=0, id="c0", name="read", arguments_delta='{"path": "a.py"}'),
        TextDelta(text=""),
        Finish(reason=FinishReason.TOOL_CALLS),
    ]
    invocation = uuid.uuid4()
    completion = collect_events(parts)
    whole = message_body(invocation, "code-agent", completion, _summary(invocation))
    assert [b["type"] for b in whole["content"]] == ["text", "tool_use"]
    assert [b["type"] for b in _blocks(_stream(parts))] == ["text", "tool_use"]
    stored = Replayed(output=completion.model_dump_json().encode())
    assert [b["type"] for b in _blocks(_stream(replay_events(stored)))] == ["text", "tool_use"]
