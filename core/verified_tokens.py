"""Bearer tokens this process has verified, so that a caller's next request with the same token
skips the signature and claims check.

Why: the check (PyJWT's decode, HS256, plus the claims) was 2.8 % of the API's main thread in a
c=1 profile of the benchmark (py-spy, 2026-12-03, 100 of 3,553 samples: about 0.25 ms a call
on the loaded machine, 82 µs timed alone), and an agent sends every call of a run with one
token.

A hit is exactly what a fresh check would say, because that check is a function of the token,
the key, the process's settings and the time, and only the time moves:
- an entry holds the key that verified it, and is used only while the verifier would pick that
  same key for the token (an RS256 key rotated out, or a key set refreshed or gone stale, gives
  another key or none, and the token is checked afresh);
- it ends at the token's `exp`, as PyJWT's check does (no leeway: valid while now < exp); `nbf`
  and `iat` only ever turn a token valid, never back;
- only tokens that verified are held; a forged, expired or unknown one is checked every time;
- settings (issuer, audience, algorithm, the HS256 secret) do not change in a running process.

Bounded: at most `size` tokens, the least recently used dropped first. Thread-safe: RS256
checks that need a fetch run off the loop (core/security.py)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Generic, TypeVar

# Distinct live tokens held. One per caller credential and hour (the default token lifetime);
# an entry is a few hundred bytes, so this is about a megabyte at most.
VERIFIED_TOKENS = 4096

_P = TypeVar("_P")


@dataclass(frozen=True)
class Verified(Generic[_P]):
    principal: _P
    key: object  # what verified it: the HS256 secret, or the issuer's PyJWK
    expires: float  # the token's `exp`, seconds since the epoch


class VerifiedTokens(Generic[_P]):
    def __init__(self, size: int = VERIFIED_TOKENS) -> None:
        self._size = size
        self._held: OrderedDict[str, Verified[_P]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, token: str, key: object, now: float) -> _P | None:
        """The principal `token` verified as with `key`, if it still holds at `now`."""
        with self._lock:
            found = self._held.get(token)
            if found is None:
                return None
            if now >= found.expires or found.key is not key:
                del self._held[token]
                return None
            self._held.move_to_end(token)
            return found.principal

    def put(self, token: str, verified: Verified[_P]) -> None:
        with self._lock:
            self._held[token] = verified
            self._held.move_to_end(token)
            while len(self._held) > self._size:
                self._held.popitem(last=False)

    def __len__(self) -> int:
        return len(self._held)
