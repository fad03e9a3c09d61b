"""Hostile input is refused before any work, as problem+json and never a 500: oversized bodies
(declared or streamed), deep JSON, bad encodings and NUL characters, and clients over their
rate limit."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from starlette.types import Message, Receive, Scope, Send

from api.app import create_app
from api.limits import VERIFIED, LimitsMiddleware, TokenBuckets, json_depth_exceeds
from core.security import TokenVerifier, mint_token
from core.settings import Settings
from tests.conftest import TokenFactory
from tests.helpers.stack import serve
from tests.helpers.surfaces import Catalog
from tests.test_jwks_off_the_loop import _Issuer

MIB = 1024 * 1024


@pytest.fixture
async def auth(token_for: TokenFactory, tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {await token_for(tenant)}"}


def _problem(resp: httpx.Response, status: int) -> dict[str, object]:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"] == "application/problem+json"
    body: dict[str, object] = resp.json()
    assert body["status"] == status
    return body


async def test_oversized_body_is_413_by_length_and_by_counting(
    http: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    big = b"x" * (MIB + 1)
    declared = await http.post(
        "/factory/model-deployments",
        content=big,
        headers={**auth, "content-type": "application/json", "X-Request-Id": "big-1"},
    )
    body = _problem(declared, 413)
    assert body["requestId"] == "big-1" and body["maxBytes"] == MIB

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(17):
            yield b" " * 65536  # no Content-Length: chunked, counted as it arrives

    streamed = await http.post(
        "/factory/model-deployments",
        content=chunks(),
        headers={**auth, "content-type": "application/json"},
    )
    _problem(streamed, 413)

    # Statement files have their own, larger limit: 2 MiB gets past the middleware (to auth).
    statements = await http.post(
        "/factory/usage-statements", content=b"a" * (2 * MIB), headers={"content-type": "text/csv"}
    )
    assert statements.status_code == 401


async def test_an_invoke_body_has_the_larger_limit_of_an_agent_session(
    http: httpx.AsyncClient, catalog: Catalog
) -> None:
    # A long agent session is sent whole each turn: past 1 MiB it was a 413 that no client
    # takes for a context overflow, and the session ended there.
    def body(mib: int) -> dict[str, Any]:
        said = "word " * (mib * MIB // 5)
        return {"model": catalog.profile("openai"), "messages": [{"role": "user", "content": said}]}

    answered = await http.post("/v1/chat/completions", json=body(3), headers=catalog.auth)
    assert answered.status_code == 200, answered.text[:500]
    assert answered.json()["choices"][0]["message"]["content"].startswith("Echo: word word")
    refused = await http.post("/v1/chat/completions", json=body(9), headers=catalog.auth)
    assert _problem(refused, 413)["maxBytes"] == 8 * MIB
    # A caller whose token did not verify is read to the usual limit only.
    anonymous = await http.post("/v1/chat/completions", json=body(3))
    assert _problem(anonymous, 413)["maxBytes"] == MIB


async def test_a_large_body_with_an_expired_token_is_told_to_authenticate(
    api_url: str, settings: Settings, catalog: Catalog
) -> None:
    """Past 1 MiB, a body whose token did not verify on the spot was a 413 before auth ran:
    a client refreshing its token on a 401 never did, and gave up. Now its token is checked
    first, and it gets the 401 its route gives, in the surface's envelope."""
    stale = settings.model_copy(update={"auth_token_ttl_seconds": -60})
    expired, _ = mint_token(
        stale, client_id="c-expired", tenant_id=catalog.tenant, roles=[], scopes=["models.invoke"]
    )
    said = "word " * (3 * MIB // 10)  # 1.5 MiB: past the usual limit, within an invoke's
    claude = anthropic.AsyncAnthropic(base_url=api_url, api_key=expired, max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as messages:
        await claude.messages.create(
            model=catalog.profile("anthropic"),
            max_tokens=10,
            messages=[{"role": "user", "content": said}],
        )
    body: Any = messages.value.body
    assert body["error"]["type"] == "authentication_error"
    assert messages.value.response.headers["www-authenticate"].endswith('error="invalid_token"')
    async with openai.AsyncOpenAI(base_url=f"{api_url}/v1", api_key=expired, max_retries=0) as gpt:
        with pytest.raises(openai.AuthenticationError):
            await gpt.responses.create(model=catalog.profile("openai"), input=said)
    # Past even an invoke's limit, the answer is the one a verified caller gets.
    with pytest.raises(anthropic.AuthenticationError):
        await claude.messages.create(
            model=catalog.profile("anthropic"),
            max_tokens=10,
            messages=[{"role": "user", "content": said * 6}],
        )


@pytest.fixture
def issuer() -> Iterator[_Issuer]:
    idp = _Issuer()
    thread = threading.Thread(target=idp.server.serve_forever, daemon=True)
    thread.start()
    yield idp
    idp.server.shutdown()


async def test_a_large_body_whose_token_verification_is_pending_is_verified_first(
    settings: Settings, issuer: _Issuer
) -> None:
    """An RS256 token whose key the process does not hold yet is not verified on the event
    loop (tests/test_jwks_off_the_loop.py): past 1 MiB it was a 413 however good the token.
    It is verified off the loop first: a good one gets an invoke's limit (and the route is
    handed the principal), a token naming a key the issuer does not have a 401."""
    rs256 = settings.model_copy(
        update={
            "auth_algorithm": "RS256",
            "auth_jwks_url": issuer.url,
            "auth_issuer": "https://idp.example",
            "auth_audience": "mr",
        }
    )
    verifier = TokenVerifier(rs256)
    body = b'{"x": "' + b"w" * (3 * MIB // 2) + b'"}'

    async def through(token: str) -> tuple[int, Any]:
        seen: list[Any] = []
        status: list[int] = []

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            message = await receive()
            assert message["body"] == body
            seen.append(scope.get("state", {}).get(VERIFIED))
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b""})

        chunks = [body[i : i + 65536] for i in range(0, len(body), 65536)]

        async def receive() -> Message:
            await asyncio.sleep(0)
            chunk = chunks.pop(0)
            return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}

        async def send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])

        scope: Scope = {
            "type": "http",
            "method": "POST",
            "path": "/v1/messages",
            "query_string": b"",
            "headers": [(b"authorization", f"Bearer {token}".encode())],
            "client": ("127.0.0.1", 40000),
        }
        await LimitsMiddleware(app, settings=rs256, verifier=verifier)(scope, receive, send)
        return status[0], seen[0] if seen else None

    status, verified = await through(issuer.token())
    assert status == 204 and verified is not None and verified[1].tenant_id == "t-ext"
    assert issuer.fetches == 1  # off the loop, as the route would have
    assert (await through(issuer.token(kid="made-up")))[0] == 401
    assert (await through(issuer.token(exp=1)))[0] == 401


@pytest.mark.parametrize("depth", [65, 100_000])
async def test_deep_json_is_refused_before_parsing(
    http: httpx.AsyncClient, auth: dict[str, str], depth: int
) -> None:
    nested = b"[" * depth + b"]" * depth
    resp = await http.post(
        "/gateway/route-plans",
        content=b'{"profileId": ' + nested + b"}",
        headers={**auth, "content-type": "application/json"},
    )
    body = _problem(resp, 400)
    assert body["errors"] == [{"field": "body", "message": "The body nests deeper than 64 levels."}]


async def test_depth_at_the_limit_goes_through_and_strings_do_not_count(
    http: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    assert not json_depth_exceeds(b'{"a": "[[[[[[[[[[[[[[[[[[[\\"[[[["}', 4)
    assert json_depth_exceeds(b'{"a": [[[[]]]]}', 4)
    resp = await http.post(
        "/gateway/route-plans",
        content=b'{"profileId": ' + b"[" * 63 + b"]" * 63 + b"}",
        headers={**auth, "content-type": "application/json"},
    )
    assert resp.status_code == 422  # schema validation, i.e. it reached the route


@pytest.mark.parametrize(
    ("content", "status"),
    [
        (b'{"deploymentId": "a\xff\xfe"}', 400),  # not UTF-8
        (b'{"deploymentId": "a\\u0000b"}', 400),  # NUL: PostgreSQL text cannot hold it
        (b'{"deploymentId": "a\\\\\\u0000b"}', 400),  # an escaped backslash, then a NUL
        # The six characters `\u0000` (a source file's, a regex's) hold no NUL: they reach the
        # route, whose schema refuses a backslash in an id.
        (b'{"deploymentId": "a\\\\u0000b"}', 422),
        (b'{"deploymentId": "a\x00b"}', 400),
        (b'{"deploymentId": "a\x01\x1fb"}', 400),  # raw control characters: invalid JSON
        (b'{"deploymentId": "\\ud800"}', 422),  # lone surrogate: a string the schema refuses
    ],
)
async def test_bad_encodings_and_control_characters_are_4xx(
    http: httpx.AsyncClient, auth: dict[str, str], content: bytes, status: int
) -> None:
    resp = await http.post(
        "/factory/model-deployments",
        content=content,
        headers={**auth, "content-type": "application/json", "Idempotency-Key": "k-1"},
    )
    _problem(resp, status)


async def test_a_nul_in_a_stored_id_of_an_invoke_body_is_a_422_naming_it(
    http: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    # An invoke body's content may hold a NUL (it goes to the provider, never to the store);
    # its ids are stored, and refuse one by name.
    request = {"messages": [{"role": "user", "content": "x\x00"}]}
    for body, field in (
        ({"profileId": "p\x00", "request": request}, "body.profileId"),
        ({"profileId": "p", "projectId": "a\x00b", "request": request}, "body.projectId"),
    ):
        resp = await http.post("/gateway/invoke", json=body, headers=auth)
        assert resp.status_code == 422, resp.text
        assert field in {e["field"] for e in resp.json()["errors"]}, resp.text
    # ResolveRoutePlan stores what it is given, and is no invoke surface: a NUL is refused
    # before its route (it went on to PostgreSQL, a 500).
    plan = {"runId": "7d1a4a52-5b83-4b36-a1a5-0a4ae0c6f0e1", "profileId": "a\x00b"}
    refused = await http.post("/gateway/route-plans", json=plan, headers=auth)
    _problem(refused, 400)


@pytest.mark.parametrize(
    "url",
    [
        "/factory/model-deployments/a%00b",
        "/factory/model-deployments/a%01b",
        "/factory/model-profiles/p?version=%00",
        "/factory/model-deployments/%FF%FE",
        "/factory/runs/%C0%AF/model-receipts",
    ],
)
async def test_hostile_urls_are_4xx(
    http: httpx.AsyncClient, auth: dict[str, str], url: str
) -> None:
    resp = await http.get(url, headers=auth)
    assert 400 <= resp.status_code < 500, resp.text
    assert resp.headers["content-type"] == "application/problem+json"


def _token(settings: Settings, tenant: str, client: str) -> str:
    """Signed with the app's key: only a verified token picks its client's bucket (a forged one
    counts against the address, tests/test_forged_tokens.py)."""
    return mint_token(settings, client_id=client, tenant_id=tenant, roles=[], scopes=[])[0]


def _limited_app(settings: Settings, **over: object) -> httpx.AsyncClient:
    app = create_app(settings.model_copy(update=over))
    transport = httpx.ASGITransport(app=app, client=("10.0.0.1", 1234))
    return httpx.AsyncClient(transport=transport, base_url="http://test")


async def test_rate_limit_per_client_then_429_with_retry_after(settings: Settings) -> None:
    a = {"Authorization": f"Bearer {_token(settings, 'ta', 'c1')}"}
    b = {"Authorization": f"Bearer {_token(settings, 'ta', 'c2')}"}
    async with _limited_app(settings, rate_limit_per_second=0.5, rate_limit_burst=2) as c:
        # No route under /nope: a 404 shows the request went through the limiter.
        assert [(await c.get("/nope", headers=a)).status_code for _ in range(2)] == [404, 404]
        limited = await c.get("/nope", headers={**a, "X-Request-Id": "rl-1"})
        body = _problem(limited, 429)
        assert limited.headers["retry-after"] == "2"  # one token at 0.5/s
        assert body["requestId"] == "rl-1"
        assert (await c.get("/nope", headers=b)).status_code == 404  # another client's bucket
        # Without a token the bucket is the peer address's.
        assert [(await c.get("/nope")).status_code for _ in range(3)] == [404, 404, 429]
        # A token sent as `x-api-key` (the anthropic SDKs' way) is its client's bucket, not the
        # address's, which is spent.
        d = {"x-api-key": _token(settings, "ta", "c3")}
        assert [(await c.get("/nope", headers=d)).status_code for _ in range(3)] == [404, 404, 429]
        # Probes are never limited, the address's bucket spent as a node's kubelet shares it.
        assert (await c.get("/healthz", headers=a)).status_code == 200


async def test_readiness_is_never_limited(settings: Settings) -> None:
    """A node's kubelet probes from the address its other traffic may share: limited, the
    probe's 429 took the pod out of the Service."""
    own = settings.model_copy(update={"rate_limit_per_second": 0.01, "rate_limit_burst": 1})
    async with serve(own) as api, httpx.AsyncClient(base_url=api.url, timeout=30) as c:
        assert [(await c.get("/nope")).status_code for _ in range(2)] == [404, 429]
        for probe in ("/healthz", "/readyz", "/readyz/process"):
            assert (await c.get(probe)).status_code == 200, probe


async def test_rate_limit_can_be_disabled(settings: Settings) -> None:
    async with _limited_app(
        settings, rate_limit_enabled=False, rate_limit_per_second=0.5, rate_limit_burst=1
    ) as c:
        assert {(await c.get("/nope")).status_code for _ in range(5)} == {404}


def test_token_bucket_refills_at_its_rate() -> None:
    now = [0.0]
    buckets = TokenBuckets(rate=2.0, burst=2, clock=lambda: now[0])
    assert [buckets.take("k") for _ in range(2)] == [0.0, 0.0]
    assert buckets.take("k") == pytest.approx(0.5)
    now[0] = 0.5
    assert buckets.take("k") == 0.0
    assert buckets.take("other") == 0.0


# Regressions for the 500s schemathesis found.


async def test_event_cursor_beyond_the_position_column_is_422(
    http: httpx.AsyncClient, auth: dict[str, str]
) -> None:
    # The column is a BIGINT: past it a cursor names no event and cannot be bound.
    resp = await http.get("/factory/events", params={"after": 2**63}, headers=auth)
    body = _problem(resp, 422)
    assert body["errors"][0]["field"] == "query.after"  # type: ignore[index]
    assert (await http.get("/factory/events", params={"after": 2**63 - 1}, headers=auth)).is_success


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"messages": [{"role": "tool", "content": "x"}]}, "body.messages.0"),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "tool_calls": [{"id": "c", "function": {"name": "f"}}],
                    }
                ]
            },
            "body.messages.0",
        ),
        ({"tool_choice": {"type": "function"}}, "body.tool_choice"),
        ({"response_format": {"type": "json_schema"}}, "body.response_format"),
    ],
)
async def test_chat_shapes_the_adapters_refuse_are_400_not_500(
    http: httpx.AsyncClient, auth: dict[str, str], extra: dict[str, object], field: str
) -> None:
    body = {"model": "no-such-profile", "messages": [{"role": "user", "content": "hi"}], **extra}
    resp = await http.post("/v1/chat/completions", json=body, headers=auth)
    problem = _problem(resp, 400)  # as OpenAI answers a request it cannot take
    assert [e["field"] for e in problem["errors"]] == [field]  # type: ignore[attr-defined]
