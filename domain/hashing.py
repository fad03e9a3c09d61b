"""Canonical JSON and content hashes: requests are identified by hash, never stored.

A value holding a string that is not text (half of a surrogate pair on its own) has no UTF-8 and
so no hash: `canonical_json` raises NotText naming where it is, which the API answers as the
request's own validation error (api/limits.py), never a 500. The request's checks refuse such a
string before any route runs (api/text_bodies.py); this is the line behind them. It is refused
rather than encoded with `surrogatepass`: that encoding is one-to-one, so the hash would be
sound, but the request would go on to be claimed and sent to a provider, and fail to encode
there (its body, its receipt's fields, its answer) after its key was used up.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from domain.text import NotText, not_text


def canonical_json(value: Any) -> bytes:
    """Sorted keys, no insignificant whitespace, UTF-8: equal values give equal bytes."""
    text = json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    try:
        return text.encode()
    except UnicodeEncodeError:
        raise NotText(not_text(value) or ()) from None


def sha256_ref(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def request_hash(value: Any) -> str:
    return sha256_ref(canonical_json(value))
