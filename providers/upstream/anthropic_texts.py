"""Anthropic's refusals of text that says nothing, as the simulator's Messages endpoint makes
them (providers/upstream/anthropic_api.py): a gateway that sends such text meets here the 400 it
meets at Anthropic."""

from __future__ import annotations

from typing import Any

from providers.upstream.chat import BadRequest

# Anthropic's refusals of text that says nothing, in its words: a text block of no text (a
# message's, a tool result's, a system block's), and a message of no content but the optional
# final assistant one. Named as Anthropic names them: a block by its list (`messages: …`,
# `system: …`), a message by its place (`messages.N: …`). A gateway that sends either meets
# here the 400 it meets at Anthropic, after its call was claimed.
_EMPTY_TEXT = "text content blocks must be non-empty"
_BLANK_TEXT = "text content blocks must contain non-whitespace text"
_NO_CONTENT = (
    "all messages must have non-empty content except for the optional final assistant message"
)


def _text_refusal(blocks: object) -> str | None:
    """Anthropic's words for the first text block of `blocks` it refuses (a tool result's own
    blocks looked in too), or None."""
    for b in blocks if isinstance(blocks, list) else ():
        kind = b.get("type") if isinstance(b, dict) else None
        text = b.get("text") if isinstance(b, dict) else None
        if kind == "text" and isinstance(text, str) and (not text or text.isspace()):
            return _BLANK_TEXT if text else _EMPTY_TEXT
        found = _text_refusal(b.get("content")) if kind == "tool_result" else None
        if found is not None:
            return found
    return None


def check_texts(body: dict[str, Any]) -> None:
    """A request body's text that says nothing, refused as Anthropic refuses it."""
    found = _text_refusal(body.get("system"))
    if found is not None:
        raise BadRequest(f"system: {found}")
    raw = body.get("messages")
    items = raw if isinstance(raw, list) else []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            continue  # refused as a message (_messages)
        content = item.get("content")
        final = i == len(items) - 1 and item.get("role") == "assistant"
        if content in ("", []) and not final:
            raise BadRequest(f"messages.{i}: {_NO_CONTENT}")
        if isinstance(content, str):  # a text block of its own, as Anthropic reads it
            content = [{"type": "text", "text": content}] if content else []
        found = _text_refusal(content)
        if found is not None:
            raise BadRequest(f"messages: {found}")
