"""A Messages request's history as normalised messages (the rest of the request:
api/anthropic_shapes.py): text, `tool_use` and `tool_result` blocks mapped; consecutive turns of
one role merged into one, as Anthropic combines them; the thinking blocks of earlier assistant
turns left out (api/anthropic_thinking.py); text blocks of no text (empty, or whitespace only)
left out, as they say nothing and Anthropic refuses them (_kept); a turn left with no content
refused, as Anthropic refuses it; and any other block refused naming it, never dropped.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from api.anthropic_thinking import thinking_left_out
from api.openai_shapes import field_errors
from api.problems import body_refused as _refuse
from providers.anthropic_convert import blank_text
from providers.types import Message, ToolCall

Loc = tuple[str | int, ...]

# Anthropic's own words for it (its 400 names `messages.N`; the field here is its content).
_EMPTY = "all messages must have non-empty content except for the optional final assistant message"


class _Loose(BaseModel):
    model_config = ConfigDict(extra="allow")


class CacheControl(_Loose):
    """A breakpoint. Its other fields (Claude Code's `scope: global`, a beta's) say where the
    cache is kept, not what is answered: taken, and never passed on (breakpoint_of), as
    Anthropic refuses them without their beta header, which no deployment is sent."""

    type: Literal["ephemeral"] = "ephemeral"
    ttl: Literal["5m", "1h"] | None = None


class ContentBlock(_Loose):
    """One content block; its fields depend on `type` and are checked when mapped."""

    type: str = Field(min_length=1, max_length=64)
    cache_control: CacheControl | None = None


# As the schema tells it: text with no character but whitespace is refused (but for a final
# assistant message, which `_turns` judges), and a schema allowing it had generated clients send
# it (schemathesis's every example was a 400). Validation is `_turns`', where the message's
# place is known.
_Text = Annotated[str, WithJsonSchema({"type": "string", "minLength": 1, "pattern": r"\S"})]


class MessageParam(_Loose):
    role: Literal["user", "assistant"]
    content: _Text | list[ContentBlock]


@dataclass
class _Turn:
    """Consecutive messages of one role, as the one turn Anthropic reads them as: their blocks
    in order, each with where it was sent (a refusal names it there)."""

    role: str
    index: int  # the first message's
    blocks: list[tuple[Loc, ContentBlock]] = field(default_factory=list)
    indices: list[int] = field(default_factory=list)  # every message's, empty ones included


def breakpoint_of(marker: CacheControl | None) -> dict[str, Any] | None:
    """What a provider is sent of a breakpoint: its type and ttl, no field of a beta."""
    if marker is None:
        return None
    return marker.model_dump(include={"type", "ttl"}, exclude_none=True)


def joined_texts(parts: Iterable[str]) -> str:
    """A message's text parts as the one text a normalised message holds, a newline between
    them so that they stay apart: joined end to end, a tool result's "Found 2 files:" and
    "a.py" read "Found 2 files:a.py", and an assistant turn's or a Responses message's
    "Context:" and "a.py" "Context:a.py". The one rule for the parts the Messages and Responses
    surfaces join (api/responses_shapes.py too); Chat Completions' text parts are still joined
    end to end (api/openai_shapes.py), not changed with these."""
    return "\n".join(parts)


def history(messages: list[MessageParam], cache: CacheControl | None) -> list[Message]:
    """The normalised messages of a history; `cache` is a top-level breakpoint. Merged, an
    assistant turn's tool calls stay one message followed by their results, as an OpenAI
    deployment requires: [assistant(call A), assistant(call B), user(results)] was two
    assistant messages, and the first's call had no result right after it (OpenAI's 400)."""
    turns = _turns(messages, cache)
    out: list[Message] = []
    for n, turn in enumerate(turns):
        if turn.role == "user":
            out += _user(turn)
        else:
            out += _assistant(turn, final=n == len(turns) - 1)
    return out


def _turns(messages: list[MessageParam], cache: CacheControl | None) -> list[_Turn]:
    last = len(messages) - 1
    turns: list[_Turn] = []
    for index, m in enumerate(messages):
        sent = (
            [ContentBlock(type="text", text=m.content)] if isinstance(m.content, str) else m.content
        )
        blocks = _kept(index, sent)
        if not blocks and not (index == last and m.role == "assistant"):
            # `[]`, `""`, or only text blocks of no text, as Anthropic refuses each (`[]` was
            # dropped: a user turn the caller sent reached no model).
            raise _refuse(("messages", index, "content"), _EMPTY)
        if index == last:
            blocks = _marked(blocks, cache)
        if not turns or turns[-1].role != m.role:
            turns.append(_Turn(m.role, index))
        turns[-1].indices.append(index)
        turns[-1].blocks += blocks
    return turns


def _kept(index: int, sent: list[ContentBlock]) -> list[tuple[Loc, ContentBlock]]:
    """A message's blocks but its text blocks of no text (empty, or whitespace only), each with
    where it was sent. Anthropic refuses those ("text content blocks must be non-empty", "…
    must contain non-whitespace text"), and they say nothing: Claude Code resuming a session
    sends `[{"type": "text", "text": ""}, tool_use]` for an assistant turn of calls alone, as
    the AI SDK and a client echoing `response.content` do. A breakpoint on one moves to the
    message's block before it (unless that has its own): the prefix it marked is the same, as
    the block left out added nothing to it; with none before it in the message, it goes too.
    A text block without a string `text` is kept, for _text to refuse."""
    kept: list[tuple[Loc, ContentBlock]] = []
    for b, block in enumerate(sent):
        text = (block.model_extra or {}).get("text")
        if block.type != "text" or not isinstance(text, str) or not blank_text(text):
            kept.append((("messages", index, "content", b), block))
        elif block.cache_control is not None and kept and kept[-1][1].cache_control is None:
            loc, before = kept[-1]
            kept[-1] = (loc, before.model_copy(update={"cache_control": block.cache_control}))
    return kept


def _marked(
    blocks: list[tuple[Loc, ContentBlock]], cache: CacheControl | None
) -> list[tuple[Loc, ContentBlock]]:
    """The last message's blocks with a top-level `cache_control` on the last one, as if the
    caller had put it there: Anthropic applies it to the request's last cacheable block, and
    every block this surface maps can be cached. One the caller marked itself stays as marked."""
    if cache is None or not blocks or blocks[-1][1].cache_control is not None:
        return blocks
    loc, block = blocks[-1]
    return [*blocks[:-1], (loc, block.model_copy(update={"cache_control": cache}))]


def _tool_result(block: ContentBlock, loc: Loc) -> tuple[str, dict[str, Any] | None]:
    """A tool result's text and its breakpoint: the block's own, or else the one its last
    marked text part carries. The result reaches a provider as one block, so a part's marker
    goes to its end, the one place a breakpoint can be put there (it was dropped). A text part
    of no text (empty, or whitespace only) is left out, as a message's text block is (_kept),
    its marker still the result's; a result left with no text is one with empty content, which
    Anthropic takes."""
    extra = block.model_extra or {}
    content = extra.get("content", "")
    cache = breakpoint_of(block.cache_control)
    if isinstance(content, str):
        return ("" if blank_text(content) else content), cache
    if not isinstance(content, list):
        raise _refuse((*loc, "content"), "must be a string or a list of text blocks")
    parts, marked = [], None
    for i, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") != "text":
            raise _refuse((*loc, "content", i), "only text blocks can be mapped")
        text = str(part.get("text", ""))
        if not blank_text(text):
            parts.append(text)
        if part.get("cache_control") is not None:
            with field_errors(*loc, "content", i, "cache_control"):
                marked = breakpoint_of(CacheControl.model_validate(part["cache_control"]))
    return joined_texts(parts), cache or marked


def _text(block: ContentBlock, loc: Loc) -> str:
    text = (block.model_extra or {}).get("text")
    if not isinstance(text, str):
        raise _refuse((*loc, "text"), "a text block needs its text")
    return text


def _result_message(block: ContentBlock, loc: Loc) -> Message:
    call_id = (block.model_extra or {}).get("tool_use_id")
    if not isinstance(call_id, str) or not call_id:
        raise _refuse((*loc, "tool_use_id"), "a tool result needs its tool_use_id")
    text, cache = _tool_result(block, loc)
    failed = (block.model_extra or {}).get("is_error") or False  # null: not flagged
    if not isinstance(failed, bool):
        raise _refuse((*loc, "is_error"), "must be a boolean")
    return Message(
        role="tool", content=text, tool_call_id=call_id, cache_control=cache, is_error=failed
    )


def _user(turn: _Turn) -> list[Message]:
    # Tool results first (the API requires them first in the turn): an OpenAI deployment
    # needs them right after the assistant turn that called the tools. A thinking block here
    # is no model's: refused as any other block that cannot be mapped.
    results, texts = [], []
    for loc, block in turn.blocks:
        if block.type == "tool_result":
            results.append(_result_message(block, loc))
        elif block.type == "text":
            cache = breakpoint_of(block.cache_control)
            texts.append(Message(role="user", content=_text(block, loc), cache_control=cache))
        else:
            raise _refuse((*loc, "type"), f"{block.type!r} blocks cannot be mapped")
    return results + texts


def _assistant(turn: _Turn, *, final: bool) -> list[Message]:
    """One message for each the caller sent: its texts joined, its calls in order. The turn (its
    consecutive assistant messages) says which thinking blocks count: those of the final turn.
    Kept apart, an Anthropic deployment gets each message's blocks in the order sent (merged
    here, a text after a call was put before it, and only the last breakpoint was kept); an
    OpenAI deployment's body joins them (providers/openai_request.py). A message that held only
    thinking of an earlier turn is left out whole, as Anthropic reads it (nothing)."""
    out: list[Message] = []
    for index, blocks in _by_message(turn):
        texts, calls, cache, kept = [], [], None, False
        for loc, block in blocks:
            if thinking_left_out(block.type, loc, final=final):
                continue
            kept = True
            extra = block.model_extra or {}
            if block.type == "text":
                texts.append(_text(block, loc))
            elif block.type == "tool_use":
                if not isinstance(extra.get("id"), str) or not isinstance(extra.get("name"), str):
                    raise _refuse(loc, "a tool_use block needs its id and name")
                arguments = json.dumps(extra.get("input") or {}, separators=(",", ":"))
                calls.append(ToolCall(id=extra["id"], name=extra["name"], arguments=arguments))
            else:
                raise _refuse((*loc, "type"), f"{block.type!r} blocks cannot be mapped")
            cache = breakpoint_of(block.cache_control) or cache
        if not kept and blocks:
            continue
        with field_errors("messages", index):
            out.append(
                Message(
                    role="assistant",
                    content=joined_texts(texts) or None,
                    tool_calls=tuple(calls),
                    cache_control=cache,
                )
            )
    return out


def _by_message(turn: _Turn) -> list[tuple[int, list[tuple[Loc, ContentBlock]]]]:
    """The turn's blocks grouped by the message they were sent in, in order; a message with no
    blocks (an empty final assistant message) as one with none, mapped as it always was."""
    groups: dict[int, list[tuple[Loc, ContentBlock]]] = {i: [] for i in turn.indices}
    for loc, block in turn.blocks:
        groups[int(loc[1])].append((loc, block))
    return list(groups.items())
