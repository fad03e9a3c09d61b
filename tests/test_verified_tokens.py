"""A bearer token that verified is held for its next check, and a held token answers exactly as a
fresh check would: never past its `exp`, never with another key, never for a token that failed
(core/verified_tokens.py; the RS256 rotation case is in tests/test_jwks_off_the_loop.py)."""

from __future__ import annotations

import secrets
import time
from typing import Any

import jwt
import pytest

from core.security import Principal, TokenError, TokenVerifier, mint_token
from core.settings import Settings
from core.verified_tokens import Verified, VerifiedTokens
from tests.helpers.deadline import eventually


@pytest.fixture
def hs256() -> Settings:
    return Settings(auth_jwt_secret=secrets.token_urlsafe(32))


def _token(settings: Settings, **claims: Any) -> str:
    now = int(time.time())
    body = {
        "iss": settings.auth_issuer,
        "aud": settings.auth_audience,
        "sub": "c-1",
        "tid": "t-1",
        "roles": ["Observer"],
        "scope": "factory.models.read",
        "iat": now,
        "nbf": now,
        "exp": now + 3600,
        **claims,
    }
    assert settings.auth_jwt_secret is not None
    return jwt.encode(body, settings.auth_jwt_secret.get_secret_value(), algorithm="HS256")


def test_a_token_that_verified_is_answered_from_what_was_held(hs256: Settings) -> None:
    verifier = TokenVerifier(hs256)
    token, _ = mint_token(hs256, client_id="c-1", tenant_id="t-1", roles=[], scopes=[])
    first = verifier.verify(token)
    # The same principal object, not a new one decoded again: the check did not run twice.
    assert verifier.verify(token) is first
    assert verifier.verify_held(token) is first
    # Another process (verifier) checks it afresh, to the same answer.
    again = TokenVerifier(hs256).verify(token)
    assert again == first and again is not first


def test_a_held_token_is_checked_afresh_from_its_exp_on(hs256: Settings) -> None:
    now = [time.time()]
    verifier = TokenVerifier(hs256, wall=lambda: now[0])
    exp = int(now[0]) + 600
    token = _token(hs256, exp=exp)
    first = verifier.verify(token)
    now[0] = exp - 0.001
    assert verifier.verify(token) is first
    now[0] = exp  # expired at exp, as PyJWT says (no leeway)
    assert verifier.verify(token) is not first


async def test_a_held_token_is_refused_once_it_has_expired(hs256: Settings) -> None:
    verifier = TokenVerifier(hs256)
    token = _token(hs256, exp=int(time.time()) + 1)
    principal = verifier.verify(token)
    assert verifier.verify(token) is principal

    def refused() -> bool:
        try:
            verifier.verify(token)
        except TokenError:
            return True
        return False

    await eventually(refused)
    with pytest.raises(TokenError):  # and stays refused
        verifier.verify(token)


def test_tokens_that_fail_are_never_held(hs256: Settings) -> None:
    verifier = TokenVerifier(hs256)
    other = Settings(auth_jwt_secret=secrets.token_urlsafe(32))
    forged = _token(other)  # the same claims, signed with another secret
    expired = _token(hs256, exp=int(time.time()) - 10)
    no_tenant = _token(hs256, tid="")
    for bad in (forged, expired, no_tenant, forged):
        with pytest.raises(TokenError):
            verifier.verify(bad)
    assert len(verifier._verified) == 0
    # A good token held does not vouch for a forged one carrying its claims.
    good = _token(hs256)
    verifier.verify(good)
    head, body, _ = good.split(".")
    with pytest.raises(TokenError):
        verifier.verify(f"{head}.{body}.{forged.split('.')[2]}")


def _principal(n: int) -> Principal:
    return Principal(client_id=f"c-{n}", tenant_id="t", roles=frozenset(), scopes=frozenset())


def test_the_held_tokens_are_bounded_least_recently_used_first() -> None:
    held: VerifiedTokens[Principal] = VerifiedTokens(size=2)
    key = object()
    for n in (1, 2):
        held.put(f"t{n}", Verified(_principal(n), key, expires=100.0))
    assert held.get("t1", key, now=1.0) == _principal(1)  # t1 now the most recent
    held.put("t3", Verified(_principal(3), key, expires=100.0))
    assert len(held) == 2
    assert held.get("t2", key, now=1.0) is None
    assert held.get("t1", key, now=1.0) == _principal(1)
    assert held.get("t3", key, now=1.0) == _principal(3)


def test_a_held_token_answers_only_for_the_key_that_verified_it() -> None:
    held: VerifiedTokens[Principal] = VerifiedTokens()
    old, new = object(), object()
    held.put("t", Verified(_principal(1), old, expires=100.0))
    assert held.get("t", new, now=1.0) is None
    # Dropped: the old key back does not bring the entry back either.
    assert held.get("t", old, now=1.0) is None
