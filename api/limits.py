"""Hostile-input limits, enforced before the app does any work: rate (token bucket per client
whose token verifies, per address otherwise),
body size (by Content-Length and by counting what arrives), JSON nesting depth, encoding and NUL
characters, numbers JSON cannot carry (NaN, Infinity, 1e400: api/non_finite.py). Pure ASGI so
streaming responses are not buffered.

A JSON body must be UTF-8 (RFC 8259 §8.1), a byte order mark before it allowed as the parser
allows it. Python's parser also reads UTF-16 and UTF-32, and every check of the body's bytes
here and in api/text_bodies.py reads them as UTF-8: a UTF-16 body's escapes (`\\ud800`,
`\\u0000`) and brackets are each followed by a zero byte, and slipped past them all (a lone
surrogate was a 500 on every invoke surface, and on /v1/responses after its call was made;
nesting past the limit was taken, and a 500 from ~300 levels).

Behind the request's checks, a string that is not text and still reaches its hash
(domain/hashing.py's NotText, raised before anything is claimed) is answered here as those checks
answer it, naming the field, never a 500.

Request bodies are read here in full (they are bounded by the size limit and every route reads
its body whole anyway) so a refusal is a clean 413/400 before any route code runs; the app then
receives the same bytes.

An invoke surface's body may be larger for a caller whose token verifies. One whose token did
not verify on the spot is verified before its body is read past the usual limit: an expired or
forged token gets the 401 its route would give, not a 413 (a client refreshing its token on a
401 never did on the 413, and gave up on a call a fresh token would have made).
"""

from __future__ import annotations

import json
import math
import re
import time
from collections import OrderedDict
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.limit_answers import not_text_answer, problem_answer, problem_of, too_large
from api.non_finite import non_finite_field
from api.problems import VALIDATION
from core.jwks import IssuerUnreachable
from core.logging import bind
from core.security import Principal, TokenError, TokenVerifier
from core.settings import Settings
from domain.text import NotText

# Probes and scrapes must keep answering whatever a client does.
_UNLIMITED_PATHS = frozenset({"/healthz", "/readyz", "/readyz/process", "/metrics"})
# Where a larger body is the point: statement files have their own, larger limit.
_LARGE_BODY_PATHS = ("/factory/usage-statements",)
# Bodies of invoke surfaces are content for the provider, never stored: they may be as large as
# MAX_INVOKE_BODY_BYTES, and a NUL in them is passed on. A coding agent's tool that printed a
# binary file quotes it back on every later turn, and all of that session's turns were
# refused. Their few stored strings (the profile and project ids) refuse a NUL themselves,
# naming the field (domain/text.StoredName).
_CONTENT_PATHS = ("/v1/", "/gateway/invoke", "/gateway/embed", "/gateway/rerank")
_JSON_TOKENS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# What json.detect_encoding names a UTF-8 body: with a byte order mark ("utf-8-sig") too, which
# json.loads, and so every route, reads as the same text.
_UTF8 = frozenset({"utf-8", "utf-8-sig"})
_MAX_BUCKETS = 100_000
# Where this middleware leaves the token it verified and whom it names, so the route's own
# check (api/deps.py) does not verify the same token a second time: a JWT decode is ~1% of the
# API's CPU per call at c=16 (bench/profile_invoke.py).
VERIFIED = "model_router.verified_token"


def json_depth_exceeds(body: bytes, limit: int) -> bool:
    """Whether the JSON text nests deeper than `limit`, without parsing it (strings skipped)."""
    depth = 0
    for match in _JSON_TOKENS.finditer(body):
        token = match.group()
        if token in (b"[", b"{"):
            depth += 1
            if depth > limit:
                return True
        elif token in (b"]", b"}"):
            depth -= 1
    return False


class TokenBuckets:
    """One bucket per key, refilled continuously; least recently used keys are forgotten first
    (a forgotten bucket comes back full, which only ever errs towards letting a request in).

    Kept hand-written rather than the `limits` package (issue 18): `limits` has fixed, moving and
    sliding windows but no token bucket, so a rate with a burst and an exact Retry-After would
    change meaning; and its cheapest limiter takes 2.0 µs a request against 0.4 µs here
    (`bench/bench_libraries.py`), on every request."""

    def __init__(self, rate: float, burst: int, clock: Any = time.monotonic) -> None:
        self.rate = rate
        self.burst = float(burst)
        self.clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def take(self, key: str) -> float:
        """0 when the request may go ahead, otherwise the seconds until it could."""
        now = self.clock()
        tokens, last = self._buckets.pop(key, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        wait = 0.0
        if tokens >= 1:
            tokens -= 1
        else:
            wait = (1 - tokens) / self.rate
        self._buckets[key] = (tokens, now)
        if len(self._buckets) > _MAX_BUCKETS:
            self._buckets.popitem(last=False)
        return wait


class LimitsMiddleware:
    def __init__(
        self, app: ASGIApp, settings: Settings, verifier: TokenVerifier | None = None
    ) -> None:
        self.app = app
        self.settings = settings
        self.buckets = (
            TokenBuckets(settings.rate_limit_per_second, settings.rate_limit_burst)
            if settings.rate_limit_enabled
            else None
        )
        self._verifier = verifier or TokenVerifier(settings)

    def _principal(self, scope: Scope, token: str | None) -> Principal | None:
        """The caller's client if its token verifies; a token that does not (forged, expired,
        unsigned) names nobody, and its request counts against the caller's address. So does
        one whose key this process does not hold yet (RS256, the key set expired or rotated):
        this runs on the event loop and never fetches, and the route verifies it off the loop
        (api/deps.py), which fetches the key set for the requests after it."""
        if token is None:
            return None
        try:
            principal = self._verifier.verify_held(token)
        except TokenError:
            return None
        if principal is not None:
            _hand_over(scope, token, principal)
        return principal

    async def _verified_for_more(self, scope: Scope, send: Send, token: str) -> Principal | None:
        """The principal of a token that did not verify on the spot, for a body past the usual
        limit: verified as its route would (off the loop when the key set must be fetched), so
        that a bad token is answered as the route answers it, before more of the body is read.
        None when it has been answered so: a 401, or a 503 when its issuer could not be asked."""
        from api.deps import invalid_token, issuer_unreachable  # here: api.deps imports this

        try:
            principal = await self._verifier.verify_from_loop(token)
        except TokenError:
            refusal = invalid_token()  # the route's own 401
        except IssuerUnreachable:
            refusal = issuer_unreachable()
        else:
            _hand_over(scope, token, principal)
            return principal
        await problem_of(scope, send, refusal)
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope.get("path", "")
        headers = dict(scope.get("headers") or [])
        token = _bearer(headers)
        principal = self._principal(scope, token)

        if self.buckets is not None and path not in _UNLIMITED_PATHS:
            if principal is not None:
                key = f"c:{principal.tenant_id}:{principal.client_id}"
            else:
                client = scope.get("client")
                key = f"a:{client[0] if client else 'unknown'}"
            wait = self.buckets.take(key)
            if wait > 0:
                await problem_answer(
                    scope,
                    send,
                    429,
                    "Too Many Requests",
                    "Rate limit exceeded for this client; retry after the indicated delay.",
                    headers=[(b"retry-after", str(max(1, math.ceil(wait))).encode())],
                )
                return

        if _CONTROL.search(path) or b"%00" in scope.get("query_string", b""):
            await problem_answer(
                scope, send, 400, "Bad Request", "The URL contains control characters."
            )
            return

        limit = self.settings.max_body_bytes
        larger = limit  # the limit for a caller whose token verifies: an invoke surface's
        if path.startswith(_LARGE_BODY_PATHS):
            limit = max(limit, self.settings.usage_statement_max_bytes)
        elif path.startswith(_CONTENT_PATHS):
            larger = max(limit, self.settings.max_invoke_body_bytes)
            if principal is not None:
                limit = larger

        async def past(size: int) -> bool:
            """Whether a body of `size` bytes is past the limit, and has been answered so. A
            token that did not verify on the spot (expired, forged, its key not held yet) is
            verified first when that would raise the limit: answered a 413 before its route
            ran, an expired token was never refreshed. Anyone without a token that verifies
            gets no more of a body read than the usual limit (1 MiB), and below it the route
            checks the token as ever."""
            nonlocal limit, principal
            if size <= limit:
                return False
            if principal is None and token is not None and larger > limit:
                principal = await self._verified_for_more(scope, send, token)
                if principal is None:
                    return True  # answered: a 401, or a 503
                limit = larger
                if size <= limit:
                    return False
            await too_large(scope, send, limit)
            return True

        length = headers.get(b"content-length")
        if length is not None and not length.isdigit():
            await too_large(scope, send, limit)
            return
        if length is not None and int(length) > limit and await past(int(length)):
            return

        body = bytearray()
        more = scope.get("method") not in ("GET", "HEAD", "OPTIONS", "DELETE") or length
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if len(body) > limit and await past(len(body)):  # awaited only past the limit
                return
            more = message.get("more_body", False)

        content_type = headers.get(b"content-type", b"").lower()
        if body and (not content_type or b"json" in content_type):
            refusal = self._check_json(bytes(body), nul_allowed=path.startswith(_CONTENT_PATHS))
            if refusal:
                detail, field = refusal
                await problem_answer(
                    scope,
                    send,
                    400,
                    "Bad Request",
                    detail,
                    type_=VALIDATION,
                    errors=[{"field": field, "message": detail}],
                )
                return

        delivered = False
        started = False

        async def replay() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            # Afterwards only a disconnect can come; streaming responses listen for it.
            return await receive()

        async def send_binding_tenant(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                # Only a verified token's tenant is one to log.
                if principal is not None:
                    bind(tenant=principal.tenant_id)
            await send(message)

        try:
            await self.app(scope, replay, send_binding_tenant)
        except NotText as exc:
            if started:
                raise  # a stream past its headers: nothing can be said in it any more
            await not_text_answer(scope, send, bytes(body), str(exc))

    def _check_json(self, body: bytes, *, nul_allowed: bool) -> tuple[str, str] | None:
        """Why the body is refused, and the field it names; None when it is not."""
        # First: every check below reads the bytes as UTF-8. Constant time: the encoding is told
        # by the first four bytes (a JSON text starts with ASCII, so zero bytes among them are
        # UTF-16's or UTF-32's), as json.loads tells it.
        if json.detect_encoding(body) not in _UTF8:
            return "The body must be UTF-8 (RFC 8259 §8.1), not UTF-16 or UTF-32.", "body"
        try:
            body.decode("utf-8")
        except UnicodeDecodeError:
            return "The body is not valid UTF-8.", "body"
        if not nul_allowed and (
            b"\x00" in body or (b"\\u0000" in body and _NUL_ESCAPE.search(body))
        ):
            return "The body contains a NUL character.", "body"
        if json_depth_exceeds(body, self.settings.max_json_depth):
            return f"The body nests deeper than {self.settings.max_json_depth} levels.", "body"
        # After the depth check: finding where one is walks the parsed body.
        field = non_finite_field(body)
        if field is not None:
            return (
                "A number is not finite (NaN, Infinity, or out of a float's range): JSON "
                "cannot carry it to the provider.",
                field,
            )
        return None


# An escaped NUL, `\u0000`, whose backslash is not itself escaped: `\\u0000` in the bytes is the
# six characters `\u0000` of a source file or a regex, which agents send all the time, and no NUL.
_NUL_ESCAPE = re.compile(rb"(?<!\\)(?:\\\\)*\\u0000")


def _bearer(headers: dict[bytes, bytes]) -> str | None:
    """The request's bearer token, as api/deps.py takes it; None when it has none."""
    if b"authorization" in headers:
        scheme, _, raw = headers[b"authorization"].partition(b" ")
        if scheme.lower() != b"bearer":
            return None
    else:
        # The same token as `x-api-key`, as api/deps.py takes it on the Messages surface (what
        # the anthropic SDKs send): counted per client too, not per address, where a NAT or a
        # sidecar would have one bucket for every client behind it.
        raw = headers.get(b"x-api-key", b"")
    try:
        token = raw.strip().decode("ascii")
    except UnicodeDecodeError:
        return None
    return token or None


def _hand_over(scope: Scope, token: str, principal: Principal) -> None:
    # The request's own state (a copy per request of the lifespan's): read by api/deps.py.
    scope.setdefault("state", {})[VERIFIED] = (token, principal)
