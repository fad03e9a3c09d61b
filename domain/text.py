"""What counts as text: a string that can be encoded as UTF-8.

JSON may escape half of a surrogate pair on its own ("\\ud800"): the document is valid JSON, but
the string holds no text. It cannot be encoded, so it cannot be hashed for idempotency, sent on
or stored. A request holding one is refused, naming the field (`not_text`): every invoke surface
answered it with a 500 (the request's hash failed). A provider's answer holding one is passed on
with U+FFFD in its place (`as_text`), as a UTF-8 decoder replaces bytes that are no text: the
call had closed as our own failure, the answer paid for and lost (2026-12-04,
`tests/test_text_not_unicode.py`).

A pair may also come cut in two, one half at the end of a delta and the other at the start of
the next: a JavaScript proxy that re-chunks text by string index does that (its strings are
UTF-16). `SplitPairs` holds the first half back until the next piece of the same text, so the
character arrives whole instead of as two U+FFFD.

A string that is no text and still reaches a request's hash (`NotText`, raised by
domain/hashing.py) names where it is, for the API to refuse it naming the field.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator

Path = tuple[str | int, ...]


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain a NUL character")
    return value


# A string of an invoke body that is stored (a profile id, a project id): PostgreSQL text holds
# no NUL. The rest of those bodies is content, which is never stored, so a NUL in it (a tool's
# binary output, quoted back on every later turn) goes on to the provider (api/limits.py).
StoredName = Annotated[str, AfterValidator(_no_nul)]


class NotText(ValueError):
    """A value to be encoded (hashed, stored) holds a string that is not text, at `where`.

    A ValueError, as the UnicodeEncodeError it replaces was: what caught that catches this. Its
    message names neither the string nor where it is, which can be anything a caller sent."""

    def __init__(self, where: Path) -> None:
        super().__init__("not text: a surrogate escape (\\ud800-\\udfff) without its pair")
        self.where = where


def not_text(value: Any, path: Path = ()) -> Path | None:
    """Where in a parsed JSON document the first string (or object key) that is not text is,
    or None when every one is text."""
    if isinstance(value, str):
        return None if is_text(value) else path
    if isinstance(value, dict):
        for key, item in value.items():
            if not is_text(key):
                return path
            found = not_text(item, (*path, key))
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = not_text(item, (*path, index))
            if found is not None:
                return found
    return None


def is_text(text: str) -> bool:
    """Whether the string is text (it encodes as UTF-8): half of a surrogate pair is not."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def as_text(value: str) -> str:
    """`value` as text: two halves of a pair side by side are their character, and every half
    that stands alone is U+FFFD. Plain ASCII, nearly every chunk of an answer, is one check."""
    if value.isascii() or is_text(value):
        return value
    # Through UTF-16, where the halves are code units: a pair decodes to its character, and
    # the decoder's "replace" gives U+FFFD for each unit it cannot pair.
    return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _high_half(char: str) -> bool:
    return "\ud800" <= char <= "\udbff"


class SplitPairs:
    """Consecutive pieces of one text (a stream's deltas) as text, with a pair cut between two
    pieces joined: a piece that ends in the first half of a pair gives it up to the next one.
    `rest()` is what is still held when the text ends or moves on: U+FFFD, the half alone."""

    __slots__ = ("held",)

    def __init__(self) -> None:
        self.held = ""

    def piece(self, value: str) -> str:
        if self.held:
            value, self.held = self.held + value, ""
        elif value.isascii():
            return value
        if value and _high_half(value[-1]):
            value, self.held = value[:-1], value[-1]
        return as_text(value)

    def rest(self) -> str:
        held, self.held = self.held, ""
        return "\ufffd" if held else ""
