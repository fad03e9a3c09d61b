"""Client-secret hashing and JWT minting/verification (HS256 local issuer, RS256 via JWKS)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
import uuid
from dataclasses import dataclass
from typing import Any

import jwt

from core.settings import Settings
from domain.enums import Role, Scope

_SCRYPT = {"n": 2**14, "r": 8, "p": 1, "dklen": 32}


def hash_secret(secret: str) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(secret.encode(), salt=salt, **_SCRYPT)
    return "scrypt$" + base64.b64encode(salt).decode() + "$" + base64.b64encode(digest).decode()


def verify_secret(secret: str, stored: str) -> bool:
    try:
        scheme, salt_b64, digest_b64 = stored.split("$")
    except ValueError:
        return False
    if scheme != "scrypt":
        return False
    digest = hashlib.scrypt(
        secret.encode(),
        salt=base64.b64decode(salt_b64),
        **_SCRYPT,
    )
    return hmac.compare_digest(digest, base64.b64decode(digest_b64))


def new_client_secret() -> str:
    return secrets.token_urlsafe(32)


@dataclass(frozen=True)
class Principal:
    client_id: str
    tenant_id: str
    roles: frozenset[Role]
    scopes: frozenset[str]


class TokenError(Exception):
    """The bearer token is missing, malformed, expired or not ours."""


def mint_token(
    settings: Settings,
    *,
    client_id: str,
    tenant_id: str,
    roles: list[str],
    scopes: list[str],
) -> tuple[str, int]:
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
    token = jwt.encode(claims, settings.auth_jwt_secret.get_secret_value(), algorithm="HS256")
    return token, settings.auth_token_ttl_seconds


class TokenVerifier:
    """Verifies bearer tokens; RS256 keys are fetched from the JWKS URL and cached."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._jwks = (
            jwt.PyJWKClient(settings.auth_jwks_url, cache_keys=True, lifespan=300)
            if settings.auth_algorithm == "RS256" and settings.auth_jwks_url
            else None
        )

    def verify(self, token: str) -> Principal:
        """Verify `token`, fetching the issuer's key set when it is not held (blocking I/O on
        RS256: off the event loop, after `verify_held` said it needs one)."""
        s = self._settings
        try:
            key: Any
            if self._jwks is not None:
                # The PyJWK itself, not its raw key: a key of another type under the token's
                # kid is then refused as a bad token (PyJWT checks the algorithm), not a TypeError.
                key = self._jwks.get_signing_key_from_jwt(token)
            elif s.auth_jwt_secret is not None:
                key = s.auth_jwt_secret.get_secret_value()
            else:
                raise TokenError("no verification key is configured")
        except jwt.PyJWTError as exc:
            raise TokenError(str(exc)) from exc
        return self._decode(token, key)

    def verify_held(self, token: str) -> Principal | None:
        """Verify `token` without any network I/O, for the event loop itself: None when that
        needs a key the process does not hold (the key set expired, or the token names a key
        not in it), for the caller to verify off the loop with `verify`. A fetch on the loop
        would stop every call and stream of the process for as long as the identity provider
        takes to answer (up to the JWKS client's 30 s timeout, on every request while it is
        down)."""
        if self._jwks is None:
            return self.verify(token)
        cache = self._jwks.jwk_set_cache
        held = cache.get() if cache is not None else None
        if held is None:
            return None
        try:
            kid = jwt.get_unverified_header(token).get("kid")
        except jwt.PyJWTError as exc:
            raise TokenError(str(exc)) from exc
        # The keys PyJWKClient would pick from (signing keys with a kid), without its refresh.
        for key in held.keys:
            if key.key_id and key.key_id == kid and key.public_key_use in ("sig", None):
                return self._decode(token, key)
        return None

    def _decode(self, token: str, key: Any) -> Principal:
        s = self._settings
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=[s.auth_algorithm],
                audience=s.auth_audience,
                issuer=s.auth_issuer,
                options={"require": ["exp", "iat", "sub", "iss", "aud"]},
            )
        except jwt.PyJWTError as exc:
            raise TokenError(str(exc)) from exc
        tenant = claims.get("tid")
        if not isinstance(tenant, str) or not tenant:
            raise TokenError("token has no tenant (tid) claim")
        roles = frozenset(Role(r) for r in claims.get("roles", []) if r in Role._value2member_map_)
        scopes = frozenset(str(claims.get("scope", "")).split())
        return Principal(client_id=str(claims["sub"]), tenant_id=tenant, roles=roles, scopes=scopes)


ALL_SCOPES: tuple[str, ...] = tuple(s.value for s in Scope)
