"""Turns a responder's Reply into the answer a provider would send: request constraints
applied, ids assigned, usage counted."""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass, field
from typing import Literal

from providers.upstream.tokens import count_tokens, truncate_tokens
from providers.upstream.turn import ChatTurn, Figure, Reply

# `context_window`: cut because the context window was full (Anthropic's
# model_context_window_exceeded; OpenAI says `length`, as for max_tokens).
Finish = Literal["stop", "length", "tool_calls", "content_filter", "context_window"]


@dataclass(frozen=True)
class AnswerToolCall:
    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class AnswerUsage:
    """`input_tokens` counts the whole prompt; the cache figures are parts of it. A reply's
    reported figures replace the counts as given, whole numbers or not (`Reply`)."""

    input_tokens: Figure
    output_tokens: Figure
    cached_input_tokens: int = 0
    cache_write_input_tokens: int = 0

    @property
    def total_tokens(self) -> Figure:
        """Input and output together, as a meter adds them; a figure that is not a count is
        passed on as given, the meter being broken anyway."""
        if isinstance(self.input_tokens, int) and isinstance(self.output_tokens, int):
            return self.input_tokens + self.output_tokens
        return self.output_tokens

    @property
    def fresh_input_tokens(self) -> Figure:
        """The prompt tokens neither read from nor written to the cache (Anthropic's
        input_tokens)."""
        if not isinstance(self.input_tokens, int):
            return self.input_tokens
        return self.input_tokens - self.cached_input_tokens - self.cache_write_input_tokens


@dataclass(frozen=True)
class Answer:
    text: str
    tool_calls: list[AnswerToolCall]
    finish: Finish
    usage: AnswerUsage
    stop_sequence: str | None = None
    text_piece: int | None = None
    # Said after the tool calls, in the same turn (Anthropic: a text block after the tool_use
    # blocks; OpenAI: content after the calls).
    text_after_calls: str = ""
    response_id: str = field(default_factory=lambda: secrets.token_hex(12))
    # `text` is a refusal (finish `content_filter`): OpenAI sends it as `refusal`.
    refused: bool = False


def new_id(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(12)}"


def _arguments(arguments: dict[str, object] | str) -> str:
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, separators=(",", ":"), ensure_ascii=False)


def _cut(text: str, after: str, turn: ChatTurn) -> tuple[str, str, str | None, bool]:
    """The text and the text after the calls as the request's stop sequences and max_tokens
    leave them, read in the order the model says them: a stop or the limit reached in the
    text ends the answer before the text after the calls. Returns (text, after, the stop
    sequence hit, truncated)."""
    stop_sequence: str | None = None
    hits = [(text.find(s), s) for s in turn.stop if s and s in text]
    if hits:
        position, stop_sequence = min(hits)
        text, after = text[:position], ""
    later = [(after.find(s), s) for s in turn.stop if s and s in after]
    if later:
        position, stop_sequence = min(later)
        after = after[:position]
    truncated = False
    if turn.max_tokens is not None:
        text, truncated = truncate_tokens(text, turn.max_tokens)
        if truncated:
            after = ""
        else:
            after, truncated = truncate_tokens(after, turn.max_tokens - count_tokens(text))
    return text, after, stop_sequence, truncated


def build_answer(
    reply: Reply,
    turn: ChatTurn,
    *,
    input_tokens: int,
    cached_input_tokens: int,
    cache_write_input_tokens: int,
    tool_id_prefix: str,
) -> Answer:
    calls = [] if reply.refusal is not None else list(reply.tool_calls)
    text = reply.refusal if reply.refusal is not None else reply.text
    after = "" if reply.refusal is not None else reply.text_after_calls
    stop_sequence: str | None = None
    truncated = False
    if not reply.verbatim:
        if turn.tool_choice == "none" or not turn.tools:
            calls = []
        elif not turn.parallel_tool_calls:
            calls = calls[:1]
        if not calls:  # no call said between them: one text, as a provider answers it
            text, after = text + after, ""
        text, after, stop_sequence, truncated = _cut(text, after, turn)
    answer_calls = [
        AnswerToolCall(
            id=c.id or new_id(tool_id_prefix), name=c.name, arguments=_arguments(c.arguments)
        )
        for c in calls
    ]
    finish: Finish = "length" if truncated else ("tool_calls" if answer_calls else "stop")
    if reply.finish_reason is not None:
        finish = reply.finish_reason
    if reply.refusal is not None:
        finish = "content_filter"
    output = (
        count_tokens(text)
        + count_tokens(after)
        + sum(count_tokens(c.name) + count_tokens(c.arguments) for c in answer_calls)
    )
    cached = (
        reply.cached_input_tokens if reply.cached_input_tokens is not None else cached_input_tokens
    )
    sent_input: Figure = input_tokens
    sent_output: Figure = output
    if reply.reported_output_tokens is not None:
        sent_output = reply.reported_output_tokens
    if reply.reported_input_tokens is not None:
        sent_input = reply.reported_input_tokens
        # The cache's parts of a prompt whose count is not a whole number: none.
        input_tokens = sent_input if isinstance(sent_input, int) else 0
    usage = AnswerUsage(
        input_tokens=sent_input,
        output_tokens=sent_output,
        cached_input_tokens=max(0, min(cached, input_tokens)),
        cache_write_input_tokens=max(
            0, min(cache_write_input_tokens, input_tokens - min(cached, input_tokens))
        ),
    )
    return Answer(
        text=text,
        tool_calls=answer_calls,
        finish=finish,
        usage=usage,
        stop_sequence=stop_sequence if finish == "stop" else None,
        text_piece=reply.text_piece,
        text_after_calls=after,
        refused=reply.refusal is not None,
    )


def prompt_prefixes(turn: ChatTurn) -> list[tuple[str, int]]:
    """(digest, tokens) of every prompt prefix at a message boundary, shortest first: the
    preamble (system and tool definitions) alone, then one more message each. The last entry
    is the whole prompt. Chained hashes keep this linear in the prompt's length."""
    preamble = [turn.system, *(json.dumps(t.model_dump(), sort_keys=True) for t in turn.tools)]
    digest = hashlib.sha256("\x00".join(preamble).encode())
    tokens = sum(count_tokens(p) for p in preamble)
    prefixes = [(digest.hexdigest(), tokens)]
    for message in turn.messages:
        parts = [message.role, message.text]
        parts += [c.name + _arguments(c.arguments) for c in message.tool_calls]
        digest.update(("\x01" + "\x00".join(parts)).encode())
        tokens += count_tokens(message.text)
        tokens += sum(
            count_tokens(c.name) + count_tokens(_arguments(c.arguments)) for c in message.tool_calls
        )
        prefixes.append((digest.copy().hexdigest(), tokens))
    return prefixes
