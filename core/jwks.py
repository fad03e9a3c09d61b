"""The external issuer's signing keys for RS256 tokens: fetched from its JWKS URL off the event
loop, held for the loop's own checks, refreshed in the background, and kept while the issuer
cannot be reached.

PyJWKClient's cache did not fit the gateway (read in PyJWT 2.x's client, 2026-12-02):
- Its key set expires after `lifespan`, and the key cache by kid (`cache_keys`) answers a known
  kid without ever refreshing the set. A key the issuer removed (rotated out, or compromised)
  kept verifying tokens until the process restarted. Meanwhile the expired set made every
  RS256 request take the thread hop, and rate-limited by peer address, from 5 minutes after
  start on.
- Once the set had expired, a token naming a kid not yet cached by kid (a key rotated in)
  fetched it under the client's one lock, up to its 30 s timeout, and a fetch that failed left
  no set at all, to be tried again by the next such request.

Here every way out is bounded. A held set older than `refresh_seconds` keeps serving while one
background fetch replaces it. A refresh that fails keeps the held set, for up to
`max_stale_seconds` after the last good fetch. A fetch waits at most `timeout_seconds` for each
read. After any fetch, failed or not, nothing is fetched again for RETRY_SECONDS, so tokens
naming made-up kids cannot make every request ask the issuer.

A token naming a kid the held set lacks, issued after that set was fetched (its `iat`, in whole
seconds, past the fetch), may be signed with a key rotated in since: when the cooldown keeps the
set from being fetched for it, the caller is told to retry when the set can be
(IssuerUnreachable, a 503), not that its token is bad (a 401, which sends a client to sign in
again for nothing). One issued before the fetch names a key that set should have held, or a key
rotated out: a 401. No allowance is made for the issuer's clock: a token issued within a second
of the fetch, or by an issuer whose clock is behind, is judged as before.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import jwt

log = logging.getLogger("model_router.auth")

# After a fetch, failed or not, the least time before the next one. A key rotated in at the
# issuer is picked up by the first token naming it after that; PyJWKClient's own cooldown is 30 s.
RETRY_SECONDS = 10.0
# How far ahead of this process's clock a token's `iat` may be and still name a key rotated in.
ISSUED_AHEAD_SECONDS = 60.0


class IssuerUnreachable(Exception):
    """The token names a key this process does not hold, and the issuer's key set could not be
    fetched (it is down, slow or answered garbage): the caller should retry, not re-authenticate."""


class UnknownKey(Exception):
    """The issuer's current key set holds no signing key by the token's kid."""


class IssuerKeys:
    def __init__(
        self,
        url: str,
        *,
        refresh_seconds: float,
        max_stale_seconds: float,
        timeout_seconds: float,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        # PyJWT's fetcher only: http(s) only, no redirects, a timeout. Nothing cached there.
        self._fetcher = jwt.PyJWKClient(url, cache_jwk_set=False, timeout=timeout_seconds)
        self._refresh = refresh_seconds
        self._max_stale = max_stale_seconds
        self._clock = clock
        self._wall = wall
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched_at = -math.inf  # the last good fetch
        self._fetched_wall = -math.inf  # the same, by the wall clock (tokens' `iat`)
        self._tried_at = -math.inf  # the last fetch begun, whatever its outcome
        self._failing = False  # whether the last fetch failed
        self._lock = threading.Lock()  # one fetch at a time

    def held(self, kid: str | None) -> jwt.PyJWK | None:
        """The signing key by `kid` from the set held, with no I/O (safe on the event loop);
        None when the set does not hold it or is too old to use. A set due for refresh that
        holds the key starts one refresh in the background and serves until it lands."""
        now = self._clock()
        found = self._usable(kid, now)
        if (
            found is not None
            and now - self._fetched_at > self._refresh
            and now - self._tried_at >= RETRY_SECONDS
            and self._lock.acquire(blocking=False)  # else a fetch is under way already
        ):
            # The lock goes with the refresh and is released when it lands, so a check that
            # needs a key waits for that refresh instead of slipping in before it.
            self._tried_at = now
            try:
                threading.Thread(target=self._refresh_then_release, daemon=True).start()
            except RuntimeError:  # no thread to be had: the next check tries again
                self._lock.release()
        return found

    def key(self, kid: str | None, issued_at: float | None = None) -> jwt.PyJWK:
        """The signing key by `kid`, fetching the set when it is not held (blocking: call it off
        the event loop). Raises UnknownKey when the issuer's set lacks it, IssuerUnreachable when
        the set could not be fetched, or could not be fetched now for a token `issued_at` after
        the held set was."""
        found = self.held(kid)
        if found is not None:
            return found
        fetched = False
        with self._lock:
            # Another thread's fetch, or a background refresh, may have brought it meanwhile.
            found = self._usable(kid, self._clock())
            if found is None and self._clock() - self._tried_at >= RETRY_SECONDS:
                self._tried_at = self._clock()
                self._fetch()
                fetched = True
                found = self._usable(kid, self._clock())
        if found is not None:
            return found
        if self._failing:
            raise IssuerUnreachable("the issuer's key set could not be fetched")
        # Issued after the set held was fetched, and not from the future beyond the clocks'
        # skew (one dated later is refused however its key is found: PyJWT checks `iat`).
        newer = (
            issued_at is not None
            and self._fetched_wall < issued_at <= self._wall() + ISSUED_AHEAD_SECONDS
        )
        if not fetched and newer:
            raise IssuerUnreachable("the token may name a key newer than the set held")
        raise UnknownKey(f"the issuer's key set has no signing key {kid!r}")

    def _usable(self, kid: str | None, now: float) -> jwt.PyJWK | None:
        if not kid or now - self._fetched_at > self._max_stale:
            return None
        return self._keys.get(kid)

    def _refresh_then_release(self) -> None:
        try:
            self._fetch()
        finally:
            self._lock.release()

    def _fetch(self) -> None:
        """Replace the held set with the issuer's current one, or keep it if that fails."""
        try:
            keys = _signing_keys(self._fetcher.fetch_data())
        except Exception as exc:  # down, slow, not JSON, no usable key: keep what is held
            if not self._failing:
                log.warning("JWKS fetch failed, keeping the held keys: %s", type(exc).__name__)
            self._failing = True
            return
        if self._failing:
            log.info("JWKS fetched again")
        self._keys = keys
        self._fetched_at = self._clock()
        self._fetched_wall = self._wall()
        self._failing = False


def _signing_keys(data: dict[str, Any]) -> dict[str, jwt.PyJWK]:
    """The keys PyJWKClient would pick from: signing use (or none given), with a kid. (Its
    `fetch_data` has already refused a body that is not a JSON object.)"""
    found = {
        key.key_id: key
        for key in jwt.PyJWKSet.from_dict(data).keys
        if key.key_id and key.public_key_use in ("sig", None)
    }
    if not found:
        raise ValueError("the JWKS endpoint holds no signing key")
    return found
