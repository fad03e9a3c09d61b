"""What counts as text: a string that can be encoded as UTF-8.

JSON may escape half of a surrogate pair on its own ("\\ud800"): the document is valid JSON, but
the string holds no text. It cannot be encoded, so it cannot be hashed for idempotency, sent on
or stored. A request holding one is refused, naming the field (`not_text`): every invoke surface
answered it with a 500 (the request's hash failed). A provider's answer holding one is passed on
with U+FFFD in its place (`as_text`), as a UTF-8 decoder replaces bytes that are no text: the
call had closed as our own failure, the answer paid for and lost (2026-12-04,
`tests/test_text_not_unicode.py`).
"""

from __future__ import annotations

import re
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")

Path = tuple[str | int, ...]


def not_text(value: Any, path: Path = ()) -> Path | None:
    """Where in a parsed JSON document the first string (or object key) that is not text is,
    or None when every one is text."""
    if isinstance(value, str):
        return None if _encodes(value) else path
    if isinstance(value, dict):
        for key, item in value.items():
            if not _encodes(key):
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


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def as_text(value: str) -> str:
    """`value` with U+FFFD for each half of a surrogate pair that stands alone (in a decoded
    string, every surrogate does). Plain ASCII, nearly every chunk of an answer, is one check."""
    if value.isascii() or _encodes(value):
        return value
    return _SURROGATE.sub("\ufffd", value)
