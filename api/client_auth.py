"""Checking an OAuth client's id and secret: one rule for the token endpoint and the console's
sign-in, so both accept exactly the same clients, and turn away the same floods.

A sign-in costs a scrypt check (16 MiB and about 40 ms of a core), which anyone may ask for.
Three bounds keep a flood of bad sign-ins from costing every tenant its service:
- the client is read on a session of its own, whose connection is back in the pool before the
  check is waited for: a flood of ~100 bad sign-ins a second from one address held one pooled
  connection per request in line, the 20-connection pool ran dry, and every tenant's reads
  (the invoke path's among them) waited 30 s and failed;
- SECRET_CHECKS runs two checks at once in the process and lets at most WAITING more wait for
  one; past that a sign-in is refused at once (SignInsBusy: 503 with Retry-After);
- an address whose sign-ins keep failing waits (TooManyFailures: 429 with Retry-After) once it
  has failed FAILURE_BURST times faster than one every 1/FAILURES_PER_SECOND s, while every
  check is taken, so one address alone cannot keep the line full and shut out everyone else's
  sign-ins. Only failures count: a client signing in with its right secret is never slowed by
  its own sign-ins, and with a check free nobody is slowed.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from anyio import CapacityLimiter, to_thread
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from core.security import verify_secret
from domain.text import is_text
from store.clients import find_client
from store.tables import OAuthClient

if TYPE_CHECKING:
    from api.runtime import Runtime

# Verifying against a fixed hash for unknown clients keeps response time from telling
# which client ids exist.
_DUMMY_HASH = "scrypt$AAAAAAAAAAAAAAAAAAAAAA==$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
# Secret checks running at once in this process. Each scrypt takes 16 MiB and tens of ms of a
# core, and anyone may ask for one (unknown clients are checked against the dummy hash): on
# anyio's shared 40-thread pool a burst of bad sign-ins held some 640 MiB against the API pod's
# 768 MiB limit, beside every stream it served, and took the threads file reads wait for.
RUNNING = 2
# Sign-ins that may wait for one of them. A check takes 38-44 ms (timeit: 37.5 ms on the 2-core
# test machine; 44 ms in the review's measurement), so the last in a full line waits about
# WAITING / RUNNING x 44 ms = 0.7 s; past that a caller is better told to come back than held.
WAITING = 32
# Failed sign-ins an address may make at once, and how fast it gets them back: 30, then one
# every 2 s. Schemathesis's run of the token endpoint (20 cases) fits in the burst; a flood
# from one address takes one check every 2 s of the process's ~45 a second.
FAILURE_BURST = 30
FAILURES_PER_SECOND = 0.5
_MAX_ADDRESSES = 100_000


class SignInRefused(Exception):
    """A sign-in turned away before its secret was checked: come back after `retry_after`.
    Each kind says what both surfaces tell the caller: its status, its OAuth `error` code
    (RFC 6749 §5.2 and RFC 8628 §3.5) and the console's words."""

    status = 503
    oauth_error = "temporarily_unavailable"
    said = "Too many sign-ins at once"

    def __init__(self, retry_after: float) -> None:
        super().__init__(self.__doc__)
        self.retry_after = max(1, math.ceil(retry_after))


class SignInsBusy(SignInRefused):
    """Too many sign-ins are waiting for a secret check; retry after the indicated delay."""


class TooManyFailures(SignInRefused):
    """Too many failed sign-ins from this address; retry after the indicated delay."""

    status = 429
    oauth_error = "slow_down"
    said = "Too many failed sign-ins from this address"


class SecretChecks:
    """At most `running` secret checks at once in the process, and at most `waiting` more in
    line for one; past that SignInsBusy, at once."""

    def __init__(self, running: int, waiting: int) -> None:
        self.limiter = CapacityLimiter(running)
        self.waiting = waiting
        self.taken = 0  # checks running or in line; changed on the event loop only

    @contextlib.contextmanager
    def place(self) -> Iterator[None]:
        """A place in line, taken before the client is read: a sign-in turned away costs no
        read of the store (with the line full, a flood spread over many addresses still did
        one pooled read per request it refused)."""
        if self.taken >= self.limiter.total_tokens + self.waiting:
            raise SignInsBusy(1)
        self.taken += 1
        try:
            yield
        finally:
            self.taken -= 1

    async def check(self, secret: str, stored: str) -> bool:
        """Within a `place`."""
        return await to_thread.run_sync(_verify, secret, stored, limiter=self.limiter)

    def contended(self) -> bool:
        """Every check is taken: a sign-in now waits for another's."""
        return self.taken >= self.limiter.total_tokens


def _verify(secret: str, stored: str) -> bool:
    return verify_secret(secret, stored)  # looked up at each call: the tests slow it down


SECRET_CHECKS = SecretChecks(RUNNING, WAITING)


class FailedSignIns:
    """A token bucket per address, taken from by failed sign-ins only; the least recently seen
    addresses are forgotten first (a forgotten one comes back full)."""

    def __init__(
        self,
        burst: int | None = None,
        per_second: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # Read as the process builds its runtime, not when this module was imported.
        self._burst = float(FAILURE_BURST if burst is None else burst)
        self._rate = FAILURES_PER_SECOND if per_second is None else per_second
        self._clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def _level(self, address: str, now: float) -> float:
        tokens, last = self._buckets.get(address, (self._burst, now))
        return min(self._burst, tokens + (now - last) * self._rate)

    def wait(self, address: str) -> float:
        """0 when the address may try, else the seconds until it may."""
        tokens = self._level(address, self._clock())
        return 0.0 if tokens >= 1 else (1 - tokens) / self._rate

    def failed(self, address: str) -> None:
        now = self._clock()
        tokens = self._level(address, now)
        self._buckets.pop(address, None)
        self._buckets[address] = (max(0.0, tokens - 1), now)
        if len(self._buckets) > _MAX_ADDRESSES:
            self._buckets.popitem(last=False)


async def authenticate(
    sessions: async_sessionmaker[AsyncSession], client_id: str, secret: str
) -> OAuthClient | None:
    """The enabled client whose secret this is, or None (unknown, disabled or wrong secret).
    Raises SignInsBusy when the line for a secret check is full."""
    with SECRET_CHECKS.place():
        client = await find_client(sessions, client_id) if _may_name_a_client(client_id) else None
        stored = client.secret_hash if client and not client.disabled else _DUMMY_HASH
        valid = await SECRET_CHECKS.check(secret, stored)
    if client is None or client.disabled or not valid:
        return None
    return client


def _may_name_a_client(client_id: str) -> bool:
    """Whether the store can be asked for a client of this id. No client id holds a NUL, which
    PostgreSQL refuses in a text value, or half of a surrogate pair, which cannot even be sent
    to it: either lookup was a 500 to a caller not signed in (a form body's `%00` or a Basic
    header's; a multipart form's `+2AA-` declared UTF-7). Such an id is an unknown client's,
    its secret still checked against the dummy hash."""
    return "\x00" not in client_id and is_text(client_id)


async def sign_in(
    runtime: Runtime, address: str | None, client_id: str, secret: str
) -> OAuthClient | None:
    """`authenticate`, for a caller at `address`: raises TooManyFailures when the address has
    failed too often lately, SignInsBusy when the line is full."""
    failures = runtime.failed_sign_ins
    key = address or "unknown"
    # Held back only while the checks are all taken, when its sign-in would keep another's
    # waiting. Refused whatever the line, one address fronting many callers (a NAT, a proxy
    # whose FORWARDED_ALLOW_IPS is not set) was shut out of sign-in for good by one service
    # still retrying an old secret once a second, its callers' right secrets included.
    wait = failures.wait(key)
    if wait > 0 and SECRET_CHECKS.contended():
        raise TooManyFailures(wait)
    client = await authenticate(runtime.sessions, client_id, secret)
    if client is None:
        failures.failed(key)
    return client
