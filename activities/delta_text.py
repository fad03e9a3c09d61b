"""A provider stream's deltas as text (domain/text.py), on their way from the adapter to the
caller.

Each string of a delta that is not text (half a surrogate pair escaped on its own) gets U+FFFD
in its place, rather than an answer that can be neither stored nor sent. A pair cut between
two deltas of the same text (the answer's text, or one tool call's arguments) is joined: the
first half waits for the next delta, and is given up as U+FFFD when the next event belongs to
something else or the stream ends. A check per delta; a copy only for the rare one that needs
it.
"""

from __future__ import annotations

from domain.text import SplitPairs, as_text
from providers.types import TextDelta, ToolCallDelta

_TEXT = -1  # the answer's text, beside tool calls 0, 1, …


def _key(event: TextDelta | ToolCallDelta) -> int:
    return _TEXT if isinstance(event, TextDelta) else event.index


class DeltaText:
    """One stream's deltas as text. `pending(event)` is the half held back, as its own delta
    carrying U+FFFD, when `event` (None: the stream ended) does not continue the text that
    holds it; `fix(delta)` is the delta as text, or None when all it held was that half."""

    __slots__ = ("_held_by", "_pairs")

    def __init__(self) -> None:
        self._pairs = SplitPairs()
        self._held_by: int | None = None

    def pending(self, event: object) -> TextDelta | ToolCallDelta | None:
        held_by = self._held_by
        if held_by is None:
            return None
        if isinstance(event, TextDelta | ToolCallDelta) and _key(event) == held_by:
            return None
        self._held_by = None
        rest = self._pairs.rest()
        if held_by == _TEXT:
            return TextDelta(text=rest)
        return ToolCallDelta(index=held_by, arguments_delta=rest)

    def fix(self, event: TextDelta | ToolCallDelta) -> TextDelta | ToolCallDelta | None:
        if isinstance(event, TextDelta):
            text = self._piece(_TEXT, event.text)
            if text is event.text:
                return event
            return event.model_copy(update={"text": text}) if text else None
        fixed = {}
        for name in ("id", "name"):
            value = getattr(event, name)
            if isinstance(value, str) and (text := as_text(value)) is not value:
                fixed[name] = text
        arguments = self._piece(event.index, event.arguments_delta)
        if arguments is not event.arguments_delta:
            if not arguments and event.id is None and event.name is None:
                return None
            fixed["arguments_delta"] = arguments
        return event.model_copy(update=fixed) if fixed else event

    def _piece(self, key: int, value: str) -> str:
        text = self._pairs.piece(value)
        self._held_by = key if self._pairs.held else None
        return text
