"""The simulator's tokeniser: words and punctuation marks. Not any real model's, but
deterministic, so tests can predict usage figures and max_tokens truncation exactly."""

from __future__ import annotations

import re

_TOKEN = re.compile(r"\w+|[^\w\s]")
_WORD = re.compile(r"\s*\S+")


def count_tokens(text: str) -> int:
    return sum(1 for _ in _TOKEN.finditer(text))


def truncate_tokens(text: str, limit: int) -> tuple[str, bool]:
    """The longest prefix of `text` holding at most `limit` tokens; True when it cut."""
    for n, match in enumerate(_TOKEN.finditer(text)):
        if n == limit:
            return text[: match.start()].rstrip(), True
    return text, False


def text_chunks(text: str, size: int | None = None) -> list[str]:
    """Stream pieces, one word each with its leading whitespace (or `size` characters each);
    they join back to `text`."""
    if size is not None:
        return fixed_chunks(text, size) if text else []
    pieces = _WORD.findall(text)
    rest = text[sum(len(p) for p in pieces) :]
    if rest:
        pieces.append(rest)
    return pieces


def fixed_chunks(text: str, size: int = 12) -> list[str]:
    """Fragments of tool-call JSON, cut without regard to JSON structure, as providers do."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]
