"""Stream events folded into a whole answer (a `Completion`): the one fold every path uses, the
stream's and a non-streamed response's alike, and the calls' numbering and text positions
kept as the stream gave them."""

from __future__ import annotations

from collections.abc import AsyncIterable, Iterable
from typing import Any

from providers.types import (
    Accepted,
    Completion,
    Finish,
    KeepAlive,
    RefusalDelta,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallDelta,
    Usage,
    UsageEvent,
)


class CompletionBuilder:
    """Folds stream events into a Completion; the same fold serves stream and non-stream."""

    def __init__(self) -> None:
        self._text: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._usage: Usage | None = None
        self._finish: Finish | None = None
        self._refusal = False
        self._text_last = False
        self._chars = 0  # characters of text so far: where each call begins in it

    def add(self, event: StreamEvent) -> None:
        if isinstance(event, Accepted | KeepAlive):
            return  # Finish repeats its request id; a keep-alive adds nothing
        if isinstance(event, TextDelta):
            if type(event) is RefusalDelta:
                self._refusal = True
            if not event.text:
                # Nothing said (an Anthropic text_delta may be empty): after a call it made
                # `ends_in_text` true, and the answer stored, replayed and referenced put the
                # text before it after the call, where the stream had it before.
                return
            self._text.append(event.text)
            self._chars += len(event.text)
            self._text_last = True
        elif isinstance(event, ToolCallDelta):
            self._text_last = False
            call = self._calls.get(event.index)
            if call is None:
                call = {"id": None, "name": None, "args": [], "at": self._chars}
                self._calls[event.index] = call
            call["id"] = call["id"] or event.id
            call["name"] = call["name"] or event.name
            call["args"].append(event.arguments_delta)
        elif isinstance(event, UsageEvent):
            self._usage = Usage(**event.model_dump(exclude={"type"}))
        else:
            self._finish = event

    @property
    def finished(self) -> bool:
        return self._finish is not None

    def build(self) -> Completion:
        if self._finish is None:
            raise ValueError("the stream has not finished")
        ordered = sorted(self._calls.items())
        calls = tuple(
            ToolCall(
                id=c["id"] or f"call_{i}",
                name=c["name"] or "",
                # A call without arguments streams none; its arguments are the empty object.
                arguments="".join(c["args"]) or "{}",
            )
            for i, c in ordered
        )
        positions = tuple(c["at"] for _, c in ordered)
        return Completion(
            text="".join(self._text),
            # Kept only when some text came after a call began.
            text_at_calls=positions if any(at < self._chars for at in positions) else (),
            tool_calls=calls,
            usage=self._usage,
            finish_reason=self._finish.reason,
            provider_request_id=self._finish.provider_request_id,
            response_id=self._finish.response_id,
            response_model=self._finish.response_model,
            stop_sequence=self._finish.stop_sequence,
            context_full=self._finish.context_full,
            refusal=self._refusal,
            ends_in_text=self._text_last and bool(self._calls),
        )


def collect_events(events: Iterable[StreamEvent]) -> Completion:
    builder = CompletionBuilder()
    for event in events:
        builder.add(event)
    return builder.build()


async def collect_stream(events: AsyncIterable[StreamEvent]) -> Completion:
    builder = CompletionBuilder()
    async for event in events:
        builder.add(event)
    return builder.build()
