"""The lean stream encoding and parsing agree with the general ones: a text chunk written from
the stream's prefix is the same bytes as the chunk dict serialised, and the adapter's SSE
reader splits events however the bytes arrive."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator

import pytest

from api import sse
from api.openai_shapes import chunk
from providers.sse import sse_data


@pytest.mark.parametrize("text", ["hello", "", 'quote " and \\ back', "é 日本 \n\t", "\u2028"])
def test_a_lean_text_chunk_is_the_chunk_dict_serialised(text: str) -> None:
    invocation = uuid.uuid4()
    texts = sse.TextChunks(invocation, "chat")
    body = chunk(invocation, "chat", {"content": text})
    body["created"] = texts.created
    assert texts.text(text) == sse.line(body)
    assert json.loads(texts.text(text)[6:])["choices"][0]["delta"]["content"] == text


async def _pieces(raw: bytes, size: int) -> AsyncIterator[bytes]:
    for i in range(0, len(raw), size):
        yield raw[i : i + size]


@pytest.mark.parametrize("size", [1, 3, 7, 1000])
async def test_the_sse_reader_splits_events_across_any_chunking(size: int) -> None:
    raw = (
        b": a comment\r\n\r\n"
        b'data: {"a":1}\n\n'
        b"event: ignored\ndata: first\ndata: second\n\n"
        b"id: 7\r\ndata:tight\r\n\r\n"
        b"data: [DONE]"
    )
    got = [d async for d in sse_data(_pieces(raw, size))]
    # The comment-only event is a keep-alive (None); a comment beside data adds nothing.
    assert got == [None, b'{"a":1}', b"first\nsecond", b"tight", b"[DONE]"]
    with_comment = b': still here\ndata: {"b":2}\n\n\n\n'
    assert [d async for d in sse_data(_pieces(with_comment, size))] == [b'{"b":2}']
