"""Client-secret hashing and JWT minting/verification (HS256 local issuer, RS256 via JWKS).

A token the console's sign-in mints says so (`use: console`, CONSOLE_USE) and is a console
session only: every verification refuses it unless the caller asks for the console's
(`console=True`, api/console/session.py only), so the session cookie is no API token. The
console's cookie was the very token `/oauth/token` mints, valid for its whole lifetime on every
/v1 and /factory path after sign-out. The refusal is a claim read, held with the verified
token: no store read on the API's path. A console session can then be ended before its `exp`
by its `jti` alone (store/console_sessions.py), a read the console makes and the API never
needs to."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import secrets
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jwt

from core.jwks import IssuerKeys, UnknownKey
from core.settings import Settings
from core.verified_tokens import Verified, VerifiedTokens
from domain.enums import Role, Scope
from domain.tenants import TENANT_ID_RULE, is_tenant_id
from domain.text import is_text

_SCRYPT = {"n": 2**14, "r": 8, "p": 1, "dklen": 32}


def hash_secret(secret: str) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(secret.encode(), salt=salt, **_SCRYPT)
    return "scrypt$" + base64.b64encode(salt).decode() + "$" + base64.b64encode(digest).decode()


def verify_secret(secret: str, stored: str) -> bool:
    """Whether `secret` is the one `stored` was hashed from. A secret that is not text (half of
    a surrogate pair: a multipart form's declared UTF-7 gives one) is no client's, whose secrets
    were all hashed from their UTF-8: it is wrong, not a 500 to a caller not signed in."""
    try:
        scheme, salt_b64, digest_b64 = stored.split("$")
    except ValueError:
        return False
    if scheme != "scrypt" or not is_text(secret):
        return False
    digest = hashlib.scrypt(
        secret.encode(),
        salt=base64.b64decode(salt_b64),
        **_SCRYPT,
    )
    return hmac.compare_digest(digest, base64.b64decode(digest_b64))


def new_client_secret() -> str:
    return secrets.token_urlsafe(32)


def credential_of(secret_hash: str) -> str:
    """A fingerprint of a client's stored secret, minted into its tokens (`cred`): every re-key
    hashes the new secret with a new salt, so the tokens minted before it name another
    credential (api/client_states.py). Nothing of the secret can be had from it."""
    digest = hashlib.sha256(b"model-router client credential\x00" + secret_hash.encode())
    return digest.hexdigest()[:32]


@dataclass(frozen=True)
class Principal:
    client_id: str
    tenant_id: str
    roles: frozenset[Role]
    scopes: frozenset[str]
    # The client's credential the token was minted under (`cred`, credential_of): present on
    # the tokens /oauth/token and the console's sign-in mint, checked against the client's
    # current one (api/client_states.py); None on an external issuer's tokens.
    credential: str | None = None
    issued_at: float | None = None  # `iat`, seconds since the epoch
    # A console session's token (the sign-in's, `use: console`): refused off the console.
    console: bool = False
    token_id: str | None = None  # `jti`: what a console sign-out records
    expires_at: float | None = None  # `exp`, seconds since the epoch


class TokenError(Exception):
    """The bearer token is missing, malformed, expired or not ours."""


# The claim, and its value, that marks a token minted by the console's sign-in.
USE_CLAIM = "use"
CONSOLE_USE = "console"


def mints_tokens(settings: Settings) -> bool:
    """Whether this deployment issues its own tokens (HS256 with a secret). With an external
    issuer (RS256) it verifies that issuer's only: a token minted here would be refused by
    every route, the console's sign-in cookie included."""
    return settings.auth_algorithm == "HS256" and settings.auth_jwt_secret is not None


def mint_token(
    settings: Settings,
    *,
    client_id: str,
    tenant_id: str,
    roles: list[str],
    scopes: list[str],
    credential: str | None = None,
    console: bool = False,
) -> tuple[str, int]:
    """A token for the client, and its lifetime. `credential` (credential_of the client's
    stored secret) makes it stop working once the client is re-keyed; `console` makes it a
    console session, which no API path takes and a sign-out ends."""
    if settings.auth_jwt_secret is None:
        raise RuntimeError("MODEL_ROUTER_AUTH_JWT_SECRET is not set")
    now = int(time.time())
    claims = {
        "iss": settings.auth_issuer,
        "aud": settings.auth_audience,
        "sub": client_id,
        "tid": tenant_id,
        "roles": roles,
        "scope": " ".join(scopes),
        "iat": now,
        "nbf": now,
        "exp": now + settings.auth_token_ttl_seconds,
        "jti": str(uuid.uuid4()),
    }
    if credential is not None:
        claims["cred"] = credential
    if console:
        claims[USE_CLAIM] = CONSOLE_USE
    token = jwt.encode(claims, settings.auth_jwt_secret.get_secret_value(), algorithm="HS256")
    return token, settings.auth_token_ttl_seconds


class TokenVerifier:
    """Verifies bearer tokens: HS256 with the local secret, RS256 with the external issuer's
    keys (core/jwks.py: held, refreshed in the background, kept while the issuer is down). A
    token that verified is held for its next check (core/verified_tokens.py) until its `exp`
    on `wall` (by default `time.time`, the clock PyJWT checks `exp` on)."""

    def __init__(
        self,
        settings: Settings,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._settings = settings
        self._wall = wall
        self._verified: VerifiedTokens[Principal] = VerifiedTokens()
        self._jwks = (
            IssuerKeys(
                settings.auth_jwks_url,
                refresh_seconds=settings.auth_jwks_refresh_seconds,
                max_stale_seconds=settings.auth_jwks_max_stale_seconds,
                timeout_seconds=settings.auth_jwks_timeout_seconds,
                clock=clock,
                wall=wall,
            )
            if settings.auth_algorithm == "RS256" and settings.auth_jwks_url
            else None
        )

    def verify(self, token: str, *, console: bool = False) -> Principal:
        """Verify `token`, fetching the issuer's key set when it holds no key for it (blocking
        I/O on RS256: off the event loop, after `verify_held` said it needs one). Raises
        TokenError for a bad token, core.jwks.IssuerUnreachable when the key set could not be
        fetched. A console session's token is a bad token unless `console` (the console's
        own check, which also takes the API's tokens, an SSO proxy's)."""
        if self._jwks is None:
            secret = self._settings.auth_jwt_secret
            if secret is None:
                raise TokenError("no verification key is configured")
            return self._decode(token, secret.get_secret_value(), console)
        try:
            # The PyJWK itself, not its raw key: a key of another type under the token's kid
            # is then refused as a bad token (PyJWT checks the algorithm), not a TypeError.
            key = self._jwks.key(_kid(token), _issued_at(token))
        except UnknownKey as exc:
            raise TokenError(str(exc)) from exc
        return self._decode(token, key, console)

    def verify_held(self, token: str, *, console: bool = False) -> Principal | None:
        """Verify `token` without any network I/O, for the event loop itself: None when that
        needs a key the process does not hold (none fetched yet, or the token names a key not
        in the set), for the caller to verify off the loop with `verify`. A fetch on the loop
        would stop every call and stream of the process for as long as the identity provider
        takes to answer."""
        if self._jwks is None:
            return self.verify(token, console=console)
        key = self._jwks.held(_kid(token))
        return self._decode(token, key, console) if key is not None else None

    async def verify_from_loop(self, token: str, *, console: bool = False) -> Principal:
        """`verify` for a caller on the event loop: with the keys held, at once; a check that
        needs the key set fetched (blocking I/O) runs in a thread."""
        held = self.verify_held(token, console=console)
        if held is not None:
            return held
        return await asyncio.to_thread(self.verify, token, console=console)

    def _decode(self, token: str, key: jwt.PyJWK | str, console: bool) -> Principal:
        principal = self._verified.get(token, key, self._wall())
        if principal is None:
            principal, expires = self._check(token, key)
            self._verified.put(token, Verified(principal, key, expires))
        # After the held look-up, so a held console token is refused as a fresh one is; a
        # field read, no store read: the API's path stays as it was.
        if principal.console and not console:
            raise TokenError("a console session's token is not an API token")
        return principal

    def _check(self, token: str, key: jwt.PyJWK | str) -> tuple[Principal, float]:
        """The token's principal and its `exp`, or TokenError."""
        s = self._settings
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=[s.auth_algorithm],
                audience=s.auth_audience,
                issuer=s.auth_issuer,
                # iat and nbf are checked below, with the clock skew an external issuer's has.
                options={
                    "require": ["exp", "iat", "sub", "iss", "aud"],
                    "verify_iat": False,
                    "verify_nbf": False,
                },
            )
        except jwt.PyJWTError as exc:
            raise TokenError(str(exc)) from exc
        _check_not_ahead(claims, self._wall())
        tenant = claims.get("tid")
        if not isinstance(tenant, str) or not tenant:
            raise TokenError("token has no tenant (tid) claim")
        # Refused here, not by the store on each write (a tid longer than every tenant_id
        # column verified, and then every write failed) nor as a workflow id that can name
        # another tenant's (domain/tenants.py).
        if not is_tenant_id(tenant):
            raise TokenError(f"token's tenant (tid) is not a tenant id: {TENANT_ID_RULE}")
        roles = frozenset(Role(r) for r in _words(claims, "roles") if r in Role._value2member_map_)
        scopes = frozenset(w for s in _words(claims, "scope") for w in s.split())
        credential = claims.get("cred")
        jti = claims.get("jti")
        principal = Principal(
            client_id=str(claims["sub"]),
            tenant_id=tenant,
            roles=roles,
            scopes=scopes,
            credential=credential if isinstance(credential, str) else None,
            issued_at=float(claims["iat"]),
            # Only tokens minted here are console sessions (only HS256 mints): an external
            # issuer's claim of that name is not ours to read, and no API path refused its token.
            console=self._jwks is None and claims.get(USE_CLAIM) == CONSOLE_USE,
            token_id=jti if isinstance(jti, str) else None,
            expires_at=float(claims["exp"]),
        )
        return principal, float(claims["exp"])


def _words(claims: dict[str, Any], claim: str) -> list[str]:
    """A claim of words: absent or null is none, a string is split on spaces (RFC 8693's
    `scope`), a list holds strings (`roles`, and the list some IdPs send as `scope`). Anything
    else is a TokenError: a `roles` of null or a number raised a TypeError, a 500 on every route
    the token was sent to, and a list-valued `scope` was read as its Python repr, a silent 403."""
    value = claims.get(claim)
    if value is None:
        return []
    if isinstance(value, str):
        return value.split()
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    raise TokenError(f"the token's {claim} is not a string or a list of strings")


# How far ahead of this process's clock an issuer's may run: its fresh tokens' `iat` and `nbf`
# are taken up to this far in the future. Without it an IdP whose clock ran a second ahead had
# its fresh tokens refused ("not yet valid (iat)"). `exp` keeps no leeway: a token past it only
# sends its client for a new one, which it does ahead of `exp` anyway.
CLOCK_SKEW_SECONDS = 60


def _check_not_ahead(claims: dict[str, Any], now: float) -> None:
    """TokenError when the token's `iat` or `nbf` is not an integer, or is later than `now`
    by more than the clock skew allowed."""
    for claim in ("iat", "nbf"):
        if claim not in claims:
            continue
        value = claims[claim]
        # A number, as PyJWT requires: not a numeric string, not a boolean.
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TokenError(f"the token's {claim} is not a number")
        try:
            at = int(value)
        except (ValueError, OverflowError):  # inf, nan
            raise TokenError(f"the token's {claim} is not a number") from None
        if at > now + CLOCK_SKEW_SECONDS:
            raise TokenError(f"the token is not yet valid ({claim})")


def _issued_at(token: str) -> float | None:
    """The token's `iat` as it says (unverified: it only decides between a 401 and a retry)."""
    try:
        iat = jwt.decode(token, options={"verify_signature": False}).get("iat")
        return float(iat) if isinstance(iat, int | float) else None
    except (jwt.PyJWTError, OverflowError):  # an `iat` of 400 digits was a 500
        return None


def _kid(token: str) -> str | None:
    try:
        kid = jwt.get_unverified_header(token).get("kid")
    except jwt.PyJWTError as exc:
        raise TokenError(str(exc)) from exc
    return kid if isinstance(kid, str) else None


ALL_SCOPES: tuple[str, ...] = tuple(s.value for s in Scope)
