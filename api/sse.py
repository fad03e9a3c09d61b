"""Lean server-sent event encoding for the chat stream: the bytes of a text-delta chunk are the
stream's fixed prefix, the text as a JSON string, and a fixed suffix — one `json.dumps` of a
string per token instead of building and serialising a dict per chunk. Any other event goes
through `line`. The output is byte-for-byte what `line(chunk(...))` writes, with the
stream's creation time in `created` (OpenAI's streams keep it fixed too)."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

_COMPACT = (",", ":")


# A comment-only event: every SSE reader skips it (the openai SDK's among them), and every
# proxy on the way sees bytes. Relayed for a provider's keep-alive (api/wire.relay).
KEEP_ALIVE_COMMENT = b": keep-alive\n\n"


def line(data: Any) -> bytes:
    return b"data: " + json.dumps(data, separators=_COMPACT).encode() + b"\n\n"


class TextChunks:
    """`chat.completion.chunk` text deltas of one stream (its id, model and creation time)."""

    __slots__ = ("_prefix", "created")

    def __init__(self, invocation_id: uuid.UUID, profile: str) -> None:
        self.created = int(time.time())
        head = {
            "id": f"chatcmpl-{invocation_id.hex}",
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": profile,
        }
        # `{"id":…,"model":…,` then the choices, as json.dumps(chunk(...)) orders them.
        self._prefix = (
            b"data: "
            + json.dumps(head, separators=_COMPACT)[:-1].encode()
            + b',"choices":[{"index":0,"delta":{"content":'
        )

    def text(self, text: str) -> bytes:
        return self._prefix + json.dumps(text).encode() + b'},"finish_reason":null}]}\n\n'
