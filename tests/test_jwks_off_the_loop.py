"""RS256 bearer tokens from an external issuer, verified against its JWKS, and the event loop:
the limits middleware, which runs on the loop for every request, never fetches the issuer's key
set; a route verifies off the loop, and the key set it fetched then serves the middleware's
checks (one verifier for both)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from starlette.types import Message, Receive, Scope, Send

from api.limits import VERIFIED, LimitsMiddleware
from core.security import TokenError, TokenVerifier
from core.settings import Settings
from domain.enums import Role


class _Issuer:
    """A real JWKS endpoint over HTTP that counts the fetches it answered."""

    def __init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        jwk.update({"kid": "k1", "use": "sig", "alg": "RS256"})
        # A key of another type beside it: a token naming it is a bad token, not an error.
        curve = ec.generate_private_key(ec.SECP256R1()).public_key()
        other = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(curve))
        other.update({"kid": "ec1", "use": "sig"})
        body = json.dumps({"keys": [jwk, other]}).encode()
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                issuer.fetches += 1
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: object) -> None:
                pass

        self.fetches = 0
        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/jwks.json"

    def token(self, kid: str = "k1", **claims: Any) -> str:
        now = int(time.time())
        body = {
            "iss": "https://idp.example",
            "aud": "mr",
            "sub": "svc",
            "tid": "t-ext",
            "scope": "factory.models.read",
            "iat": now,
            "exp": now + 600,
            **claims,
        }
        return jwt.encode(body, self.key, algorithm="RS256", headers={"kid": kid})


@pytest.fixture
def issuer() -> Iterator[_Issuer]:
    idp = _Issuer()
    thread = threading.Thread(target=idp.server.serve_forever, daemon=True)
    thread.start()
    yield idp
    idp.server.shutdown()


@pytest.fixture
def rs256(settings: Settings, issuer: _Issuer) -> Settings:
    return settings.model_copy(
        update={
            "auth_algorithm": "RS256",
            "auth_jwks_url": issuer.url,
            "auth_issuer": "https://idp.example",
            "auth_audience": "mr",
        }
    )


async def _through(settings: Settings, verifier: TokenVerifier, token: str) -> Any:
    """One GET through the limits middleware; what the app behind it found verified (None:
    nothing)."""
    seen: list[Any] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(scope.get("state", {}).get(VERIFIED))
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def receive() -> Message:
        return {"type": "http.disconnect"}

    async def send(_message: Message) -> None:
        pass

    scope: Scope = {
        "type": "http",
        "method": "GET",
        "path": "/factory/model-profiles",
        "query_string": b"",
        "headers": [(b"authorization", f"Bearer {token}".encode())],
        "client": ("127.0.0.1", 40000),
    }
    await LimitsMiddleware(app, settings=settings, verifier=verifier)(scope, receive, send)
    assert len(seen) == 1, "the request did not reach the app"
    return seen[0]


async def test_rs256_tokens_from_an_external_issuer_verify_against_jwks(
    rs256: Settings, issuer: _Issuer
) -> None:
    verifier = TokenVerifier(rs256)
    good = issuer.token(roles=["Observer", "NotARole"], exp=int(time.time()) + 60)
    principal = await asyncio.to_thread(verifier.verify, good)
    assert principal.tenant_id == "t-ext"
    assert principal.roles == {Role.OBSERVER}
    assert principal.scopes == {"factory.models.read"}

    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    claims = jwt.decode(good, options={"verify_signature": False})
    bad = jwt.encode(claims, other_key, algorithm="RS256", headers={"kid": "k1"})
    with pytest.raises(TokenError):
        await asyncio.to_thread(verifier.verify, bad)
    with pytest.raises(TokenError):
        await asyncio.to_thread(verifier.verify, issuer.token(tid=""))


async def test_the_middleware_never_fetches_the_key_set_and_uses_the_one_a_route_fetched(
    rs256: Settings, issuer: _Issuer
) -> None:
    verifier = TokenVerifier(rs256)
    token = issuer.token()

    # No key set held yet: the request goes on unverified (the route verifies it), and the
    # identity provider was not asked from the event loop.
    assert await _through(rs256, verifier, token) is None
    assert issuer.fetches == 0
    assert verifier.verify_held(token) is None

    # A route's check, off the loop, fetches the key set once.
    principal = await asyncio.to_thread(verifier.verify, token)
    assert principal.tenant_id == "t-ext"
    assert issuer.fetches == 1

    # From then on the middleware verifies with the held keys, and fetches nothing.
    verified = await _through(rs256, verifier, token)
    assert verified is not None and verified[1].tenant_id == "t-ext"
    assert verifier.verify_held(token) == principal
    # A key the set does not hold (rotated in at the issuer, or made up) is not refreshed on
    # the loop either: the route's check would refresh it.
    assert await _through(rs256, verifier, issuer.token(kid="k2")) is None
    assert issuer.fetches == 1


async def test_a_held_key_still_refuses_bad_tokens(rs256: Settings, issuer: _Issuer) -> None:
    verifier = TokenVerifier(rs256)
    await asyncio.to_thread(verifier.verify, issuer.token())
    fetches = issuer.fetches
    with pytest.raises(TokenError):
        verifier.verify_held(issuer.token(exp=int(time.time()) - 5))  # expired
    with pytest.raises(TokenError):
        verifier.verify_held(issuer.token(aud="someone-else"))
    with pytest.raises(TokenError):
        verifier.verify_held(issuer.token(tid=""))
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    forged = jwt.encode(
        {"iss": "https://idp.example", "aud": "mr", "sub": "x", "tid": "t", "iat": 1, "exp": 2**31},
        other,
        algorithm="RS256",
        headers={"kid": "k1"},
    )
    with pytest.raises(TokenError):
        verifier.verify_held(forged)
    with pytest.raises(TokenError):
        verifier.verify_held("not-a-jwt")
    with pytest.raises(TokenError):
        verifier.verify_held(issuer.token(kid="ec1"))  # an EC key for an RS256 token
    assert issuer.fetches == fetches
    with pytest.raises(TokenError):  # the route's check, off the loop, says the same
        await asyncio.to_thread(verifier.verify, issuer.token(kid="ec1"))
