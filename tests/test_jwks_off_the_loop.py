"""RS256 bearer tokens from an external issuer, verified against its JWKS, and the event loop:
the limits middleware, which runs on the loop for every request, never fetches the issuer's key
set; a route verifies off the loop, and the key set it fetched then serves the middleware's
checks (one verifier for both). The held set is refreshed in the background and kept while the
issuer is down (core/jwks.py); every fetch is bounded, and a token that cannot be checked for
want of the issuer gets a 503, not a 401."""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anthropic
import httpx
import jwt
import openai
import pytest
import uvicorn
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from starlette.types import Message, Receive, Scope, Send

from api.app import create_app
from api.limits import VERIFIED, LimitsMiddleware
from core.jwks import RETRY_SECONDS, IssuerUnreachable
from core.security import ALL_SCOPES, Principal, TokenError, TokenVerifier
from core.settings import Settings
from domain.enums import Role
from tests.conftest import free_port
from tests.helpers.deadline import eventually
from tests.helpers.stack import serve


class _Issuer:
    """A real JWKS endpoint over HTTP that counts the requests it got. It can be down (503),
    hang until released, or rotate to a new key."""

    def __init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.keys = [_jwk(self.key, "k1")]
        # A key of another type beside it: a token naming it is a bad token, not an error.
        curve = ec.generate_private_key(ec.SECP256R1()).public_key()
        other = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(curve))
        other.update({"kid": "ec1", "use": "sig"})
        self.keys.append(other)
        self.down = False
        self.release = threading.Event()  # while `hanging`, each request waits for it
        self.hanging = False
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                issuer.fetches += 1
                if issuer.hanging:
                    issuer.release.wait(60)
                if issuer.down:
                    self.send_response(503)
                    self.end_headers()
                    return
                body = json.dumps({"keys": issuer.keys}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: object) -> None:
                pass

        self.fetches = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/jwks.json"

    def rotate(self, kid: str = "k2") -> None:
        """The issuer signs with a new key `kid` from now on, and k1 leaves its key set (or, with
        `kid="k1"`, is replaced under the same name)."""
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.keys = [_jwk(self.key, kid)]

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


def _jwk(key: rsa.RSAPrivateKey, kid: str) -> dict[str, Any]:
    jwk: dict[str, Any] = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    jwk.update({"kid": kid, "use": "sig", "alg": "RS256"})
    return jwk


class _Clock:
    """The verifier's monotonic clock, moved by the test: the key set's age without waiting."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def issuer() -> Iterator[_Issuer]:
    idp = _Issuer()
    thread = threading.Thread(target=idp.server.serve_forever, daemon=True)
    thread.start()
    yield idp
    idp.release.set()
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


def without_temporal(settings: Settings) -> Settings:
    """For an app of its own, without Temporal (its routes read the catalog only): with the
    suite's client it would register a second in-process worker on the suite's invocation
    queue."""
    return settings.model_copy(
        update={
            "temporal_address": f"127.0.0.1:{free_port()}",
            "temporal_connect_timeout_seconds": 1.0,
        }
    )


@dataclass
class _Held:
    """A verifier on the test's clock that has fetched the issuer's key set once, for `token`."""

    clock: _Clock
    verifier: TokenVerifier
    token: str
    principal: Principal


@pytest.fixture
async def held(rs256: Settings, issuer: _Issuer) -> _Held:
    clock = _Clock()
    verifier = TokenVerifier(rs256, clock)
    token = issuer.token()
    principal = await asyncio.to_thread(verifier.verify, token)
    assert issuer.fetches == 1
    return _Held(clock, verifier, token, principal)


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
    # A tenant id no tenant_id column holds is refused here, not by the store on each write.
    with pytest.raises(TokenError, match="tid"):
        await asyncio.to_thread(verifier.verify, issuer.token(tid="t" * 101))
    longest = await asyncio.to_thread(verifier.verify, issuer.token(tid="t" * 100))
    assert longest.tenant_id == "t" * 100
    # A `/` would make `deployment/{tenant}/{deploymentId}` name another tenant's workflow
    # (`acme/prod` + `x` is `acme` + `prod/x`); nor may a tenant id name another directory.
    for tid in ("acme/prod", "..", "-x", "a b", "t\u00e9", "t\n"):
        with pytest.raises(TokenError, match="tid"):
            await asyncio.to_thread(verifier.verify, issuer.token(tid=tid))


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


async def test_an_issuer_whose_clock_runs_ahead_still_has_its_fresh_tokens_taken(
    rs256: Settings, issuer: _Issuer
) -> None:
    # Its `iat` (and `nbf`) a few seconds ahead of this process's clock: refused as not yet
    # valid, every fresh token a 401 until the clocks met.
    verifier = TokenVerifier(rs256)
    ahead = int(time.time()) + 5
    assert (await asyncio.to_thread(verifier.verify, issuer.token(iat=ahead, nbf=ahead))).tenant_id
    # Far ahead is still refused, and a claim that is no integer is a bad token.
    for claims in (
        {"iat": ahead + 3600},
        {"nbf": ahead + 3600},
        {"nbf": "soon"},
        {"iat": str(ahead)},  # a number, as PyJWT required: not a numeric string
        {"nbf": True},
    ):
        with pytest.raises(TokenError):
            await asyncio.to_thread(verifier.verify, issuer.token(**claims))
    # An `iat` of 400 digits on a key the set lacks was an OverflowError: a 500 to anyone.
    with pytest.raises(TokenError):
        await asyncio.to_thread(verifier.verify, issuer.token(kid="made-up", iat=10**400))


async def test_a_key_set_due_for_refresh_serves_on_the_loop_while_one_refresh_runs_behind(
    rs256: Settings, issuer: _Issuer, held: _Held
) -> None:
    clock, verifier, token, principal = held.clock, held.verifier, held.token, held.principal
    # Past the refresh age the held set still verifies on the loop (before, an expired set sent
    # every RS256 request to its route's thread, rate-limited by its peer address) ...
    clock.now += rs256.auth_jwks_refresh_seconds + 1
    for _ in range(20):
        assert verifier.verify_held(token) == principal
    verified = await _through(rs256, verifier, token)
    assert verified is not None and verified[1] == principal
    # ... and one refresh, not one per request, went to the issuer behind them.
    await eventually(lambda: issuer.fetches == 2)
    assert verifier.verify_held(token) == principal
    assert issuer.fetches == 2


async def test_while_the_issuer_is_down_held_keys_keep_verifying_and_nobody_waits_for_it(
    rs256: Settings, issuer: _Issuer, held: _Held
) -> None:
    clock, verifier, token, principal = held.clock, held.verifier, held.token, held.principal

    issuer.down = True
    clock.now += rs256.auth_jwks_refresh_seconds + 1
    assert verifier.verify_held(token) == principal  # its refresh fails behind it
    await eventually(lambda: issuer.fetches == 2)
    # The route's check, off the loop: the held key, no fetch, no wait.
    assert await asyncio.to_thread(verifier.verify, token) == principal
    # A key the set does not hold cannot be checked: the issuer is unreachable (a 503 at the
    # route), and it is not asked again within the retry interval.
    with pytest.raises(IssuerUnreachable):
        await asyncio.to_thread(verifier.verify, issuer.token(kid="k9"))
    assert issuer.fetches == 2

    # Refreshes go on being tried behind the held set, one per retry interval.
    clock.now += RETRY_SECONDS + 1
    assert verifier.verify_held(token) == principal
    await eventually(lambda: issuer.fetches == 3)

    # Past the stale bound the held set is dropped, and a token's check fails as unreachable.
    clock.now += rs256.auth_jwks_max_stale_seconds
    assert verifier.verify_held(token) is None
    with pytest.raises(IssuerUnreachable):
        await asyncio.to_thread(verifier.verify, token)
    assert issuer.fetches == 4

    # The issuer back: the next check after the retry interval fetches and verifies.
    issuer.down = False
    clock.now += RETRY_SECONDS + 1
    assert await asyncio.to_thread(verifier.verify, token) == principal
    assert issuer.fetches == 5
    assert verifier.verify_held(token) == principal


async def test_a_key_the_issuer_rotated_out_stops_verifying_once_the_set_is_refreshed(
    rs256: Settings, issuer: _Issuer, held: _Held
) -> None:
    clock, verifier, old = held.clock, held.verifier, held.token
    issuer.rotate()
    new = issuer.token(kid="k2")

    clock.now += rs256.auth_jwks_refresh_seconds + 1
    assert verifier.verify_held(old) is not None  # until the refresh lands
    await eventually(lambda: verifier.verify_held(old) is None)
    # Before, PyJWKClient's cache by kid kept answering k1 until the process restarted.
    with pytest.raises(TokenError):
        await asyncio.to_thread(verifier.verify, old)
    new_principal = verifier.verify_held(new)
    assert new_principal is not None and new_principal.tenant_id == "t-ext"
    assert issuer.fetches == 2


async def test_a_key_replaced_under_its_kid_stops_verifying_the_old_keys_tokens(
    rs256: Settings, issuer: _Issuer, held: _Held
) -> None:
    # `held` verified its token once, so the verifier holds it (core/verified_tokens.py): that
    # must not outlive the key that verified it.
    clock, verifier, old = held.clock, held.verifier, held.token
    assert verifier.verify_held(old) is held.principal
    issuer.rotate(kid="k1")
    clock.now += rs256.auth_jwks_refresh_seconds + 1

    def refused() -> bool:
        try:
            verifier.verify_held(old)
        except TokenError:
            return True
        return False

    await eventually(refused)
    new = verifier.verify_held(issuer.token(kid="k1"))
    assert new is not None and new.tenant_id == "t-ext"


async def test_a_key_rotated_in_is_fetched_for_the_first_token_naming_it(
    rs256: Settings, issuer: _Issuer, held: _Held
) -> None:
    clock, verifier = held.clock, held.verifier
    issuer.rotate()
    new = issuer.token(kid="k2")
    # The set is due for refresh, and the first token the loop sees names the new key: the loop
    # leaves it to the route, whose check fetches the set at once and verifies it.
    clock.now += rs256.auth_jwks_refresh_seconds + 1
    assert verifier.verify_held(new) is None
    principal = await asyncio.to_thread(verifier.verify, new)
    assert principal.tenant_id == "t-ext"
    assert issuer.fetches == 2
    assert verifier.verify_held(new) == principal


async def test_tokens_naming_made_up_keys_ask_the_issuer_once_per_retry_interval(
    issuer: _Issuer, held: _Held
) -> None:
    # Issued an hour ago, before the set held was fetched: that set should hold their keys.
    clock, verifier = held.clock, held.verifier
    old = int(time.time()) - 3600
    for i in range(20):
        with pytest.raises(TokenError):
            await asyncio.to_thread(verifier.verify, issuer.token(kid=f"made-up-{i}", iat=old))
    assert issuer.fetches == 1
    clock.now += RETRY_SECONDS + 1
    for i in range(5):
        with pytest.raises(TokenError):
            await asyncio.to_thread(verifier.verify, issuer.token(kid=f"later-{i}", iat=old))
    assert issuer.fetches == 2


async def test_a_key_rotated_in_just_after_a_fetch_is_a_retry_not_a_bad_token(
    rs256: Settings, issuer: _Issuer
) -> None:
    # The issuer starts signing with a new key moments after this process fetched its set:
    # the cooldown keeps the set from being fetched again, and the token was a 401, which
    # sends a client to sign in again for nothing. It is now told to retry, and then served.
    # The set is fetched, by this process's wall clock, 5 s before the new key's first token.
    clock = _Clock()
    verifier = TokenVerifier(rs256, clock, wall=lambda: time.time() - 5)
    await asyncio.to_thread(verifier.verify, issuer.token())
    fetches = issuer.fetches
    issuer.rotate()
    new = issuer.token(kid="k2")
    with pytest.raises(IssuerUnreachable):
        await asyncio.to_thread(verifier.verify, new)
    assert issuer.fetches == fetches  # the cooldown held
    # A made-up kid's token dated in the future is no key rotated in: a 401 at once.
    with pytest.raises(TokenError):
        future = issuer.token(kid="made-up", iat=int(time.time()) + 3600)
        await asyncio.to_thread(verifier.verify, future)
    clock.now += RETRY_SECONDS + 1
    principal = await asyncio.to_thread(verifier.verify, new)
    assert principal.tenant_id == "t-ext"


async def test_an_issuer_that_does_not_answer_is_given_up_on_after_the_fetch_timeout(
    rs256: Settings, issuer: _Issuer
) -> None:
    verifier = TokenVerifier(rs256.model_copy(update={"auth_jwks_timeout_seconds": 0.3}))
    issuer.hanging = True
    # The issuer holds the request for a minute; the check gives up long before (the outer
    # bound only keeps a broken build from hanging the suite).
    with pytest.raises(IssuerUnreachable):
        await asyncio.wait_for(asyncio.to_thread(verifier.verify, issuer.token()), timeout=30)
    assert issuer.fetches == 1


async def test_a_route_answers_503_with_retry_after_when_the_issuer_cannot_be_reached(
    rs256: Settings, issuer: _Issuer
) -> None:
    alone = without_temporal(rs256)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(alone), port=port, log_level="error"))
    task = asyncio.create_task(server.serve())
    try:
        await eventually(lambda: server.started or task.done())
        assert not task.done(), "the API did not start"
        issuer.down = True
        headers = {"Authorization": f"Bearer {issuer.token(roles=['Observer'])}"}
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            for _ in range(3):
                down = await http.get("/factory/model-profiles", headers=headers)
                assert down.status_code == 503  # not a 401: the token may well be good
                assert down.headers["content-type"] == "application/problem+json"
                assert down.headers["retry-after"] == str(math.ceil(RETRY_SECONDS))
                assert down.json()["reason"] == "issuer-unreachable"
        # The Messages surface answers the same in Anthropic's envelope, which its SDK reads as
        # a retryable overload of the server, not a bad key.
        async with anthropic.AsyncAnthropic(
            base_url=f"http://127.0.0.1:{port}", api_key=issuer.token(), max_retries=0
        ) as claude:
            with pytest.raises(anthropic.APIStatusError) as refused:
                await claude.messages.create(
                    model="code-agent", max_tokens=16, messages=[{"role": "user", "content": "hi"}]
                )
        assert refused.value.status_code == 503
        assert refused.value.response.headers["retry-after"] == str(math.ceil(RETRY_SECONDS))
        assert refused.value.response.headers.get("x-should-retry") != "false"
        answer = refused.value.response.json()
        assert answer["type"] == "error" and answer["reason"] == "issuer-unreachable"
        # And the Responses surface in OpenAI's envelope: a server error its SDK would retry.
        async with openai.AsyncOpenAI(
            base_url=f"http://127.0.0.1:{port}/v1", api_key=issuer.token(), max_retries=0
        ) as gpt:
            with pytest.raises(openai.APIStatusError) as refused_too:
                await gpt.responses.create(model="code-agent", input="hi")
        assert refused_too.value.status_code == 503
        assert refused_too.value.response.headers["retry-after"] == str(math.ceil(RETRY_SECONDS))
        assert refused_too.value.response.headers.get("x-should-retry") != "false"
        answer = refused_too.value.response.json()
        assert answer["error"]["type"] == "server_error"
        assert answer["reason"] == "issuer-unreachable"
        # Asked once: the requests after it were refused within the retry interval.
        assert issuer.fetches == 1
    finally:
        server.should_exit = True
        await task


async def test_with_an_external_issuer_nothing_mints_tokens_and_the_console_takes_its_own(
    rs256: Settings, issuer: _Issuer
) -> None:
    # With RS256 and the HS256 secret still set (the k8s manifest requires it), the console's
    # sign-in minted an HS256 cookie every page refused: back to the form, with no word. The
    # token endpoint minted the same, and the CLI got a 401 after a token it was given.
    alone = without_temporal(rs256)
    assert alone.auth_jwt_secret is not None
    async with serve(alone) as api, httpx.AsyncClient(base_url=api.url, timeout=30) as http:
        form = await http.get("/console/sign-in")
        assert form.status_code == 200 and "external issuer" in form.text
        minted = await http.post(
            "/oauth/token", data={"grant_type": "client_credentials"}, auth=("any", "secret")
        )
        assert minted.status_code == 400, minted.text
        assert "external issuer" in minted.json()["error_description"]
        # Through an SSO proxy, the issuer's own token on each request is the session.
        token = issuer.token(roles=["Observer"], scope=" ".join(ALL_SCOPES))
        page = await http.get("/console/receipts", headers={"Authorization": f"Bearer {token}"})
        assert page.status_code == 200, page.text[:300]
        assert (await http.get("/console/receipts")).status_code == 303  # none: sign in
