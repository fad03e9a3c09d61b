"""Request bodies in an encoding other than UTF-8, and strings in them that are not text.

- A JSON body must be UTF-8 (RFC 8259 §8.1); a byte order mark before it is taken, as the
  parser takes it. Python's parser also reads UTF-16 and UTF-32, whose zero bytes hid every
  escape and bracket from the checks of the body's bytes (api/limits.py, api/text_bodies.py): a
  lone surrogate was a 500 on every invoke surface, and on /v1/responses (in `metadata`, which
  is not hashed) only after the provider was called and the receipt written; nesting past the
  limit was taken, and from ~300 levels a 500. Each is now a 400 naming `body`, in the
  surface's own envelope, before anything is claimed or called.
- A multipart form declaring UTF-7 decodes plain ASCII (`+2AA-`) to half of a surrogate pair: a
  client id holding one was a 500 from the store at /oauth/token, to a caller not signed in,
  and a CSRF token one at the console. Such a form is a 400 in each path's terms; behind that,
  a client id or secret that is not text is an unknown client's, and a CSRF token or sign-in
  nonce that is not ASCII text is not the session's.
- A string that is not text and still reaches the request's hash (domain/hashing.py) is
  refused naming the field, as the request's checks refuse it, not a 500.

The official SDKs cannot send any of these (they encode UTF-8 and declare no charset): these
requests are raw HTTP.
"""

from __future__ import annotations

import json
import re
from typing import Any, cast

import httpx
import pytest
from fastapi import Request
from fastapi.exceptions import RequestValidationError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api import text_bodies
from api.console.session import ConsoleError, Operator, check_csrf
from core.security import Principal, hash_secret, verify_secret
from providers.upstream import UpstreamServer
from tests.helpers.browser import ConsoleSession
from tests.helpers.receipts import receipt_count
from tests.helpers.surfaces import Catalog

LONE = "\\ud83d"  # the escape as the JSON text holds it: a high surrogate, no low one
UTF7_LONE = "+2AA-"  # "\ud800" in UTF-7, from ASCII bytes alone
NOT_UTF8 = ("utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be")  # no BOM: json.loads reads them


def _bodies(profile: str) -> list[tuple[str, dict[str, Any]]]:
    """(path, body with the marker "TEXT" where the escape goes) of each JSON surface."""
    chat = [{"role": "user", "content": "TEXT"}]
    return [
        ("/v1/chat/completions", {"model": profile, "messages": chat}),
        ("/v1/embeddings", {"model": profile, "input": ["TEXT"]}),
        ("/v1/messages", {"model": profile, "max_tokens": 20, "messages": chat}),
        ("/v1/messages/count_tokens", {"model": profile, "messages": chat}),
        ("/v1/responses", {"model": profile, "input": "TEXT"}),
        # Not part of the request's hash: the call was made, and only its answer failed.
        ("/v1/responses", {"model": profile, "input": "hi", "metadata": {"a": "TEXT"}}),
        ("/gateway/invoke", {"profileId": profile, "request": {"messages": chat}}),
    ]


def _encoded(body: dict[str, Any], text: str, encoding: str) -> bytes:
    return json.dumps(body).replace("TEXT", text).encode(encoding)


async def _post(
    http: httpx.AsyncClient, auth: dict[str, str], path: str, content: bytes
) -> httpx.Response:
    headers = {**auth, "content-type": "application/json", "anthropic-version": "2023-06-01"}
    return await http.post(path, content=content, headers=headers, timeout=30)


def _refused(resp: httpx.Response, path: str, field: str, status: int = 400) -> str:
    """A refusal naming `field` in the surface's envelope; the message it gives."""
    assert resp.status_code == status, (path, resp.status_code, resp.text)
    found = resp.json()
    if path.startswith("/v1/messages"):  # Anthropic's envelope, which its SDK reads
        assert found["type"] == "error", found
        assert found["error"]["type"] == "invalid_request_error", found
        assert found["errors"] == [{"field": field, "message": found["errors"][0]["message"]}]
        return str(found["error"]["message"])
    assert [e["field"] for e in found["errors"]] == [field], (path, found)
    if path.startswith("/v1/"):  # OpenAI's `error` member, which its SDK reads
        assert found["error"]["type"] == "invalid_request_error", found
    else:
        assert resp.headers["content-type"] == "application/problem+json", path
    return str(found["errors"][0]["message"])


async def test_a_json_body_in_utf16_or_utf32_is_refused_and_utf8_with_a_bom_is_taken(
    http: httpx.AsyncClient,
    catalog: Catalog,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
) -> None:
    calls = upstream.state.stats.total
    for encoding in NOT_UTF8:
        for path, body in _bodies(catalog.profile("openai")):
            resp = await _post(http, catalog.auth, path, _encoded(body, LONE, encoding))
            message = _refused(resp, path, "body")
            assert "must be UTF-8" in message, (encoding, path, message)
    assert await receipt_count(sessions, tenant) == 0
    assert upstream.state.stats.total == calls
    # The same body in UTF-8, a byte order mark before it, is read as it always was.
    path, body = _bodies(catalog.profile("openai"))[0]
    taken = await _post(http, catalog.auth, path, b"\xef\xbb\xbf" + _encoded(body, "hi", "utf-8"))
    assert taken.status_code == 200, taken.text
    assert await receipt_count(sessions, tenant) == 1


def _hidden_nesting(depth: int) -> dict[str, Any]:
    """A tool's JSON schema nesting `depth` lists, hidden from a scan of a UTF-16 body's bytes
    as UTF-8: the escaped quote in `description` is a backslash, a zero byte (taken as the
    character escaped) and a quote (taken as the string's end), so from there on the scan takes
    what is between strings for strings, the lists among it."""
    lists: list[Any] = []
    for _ in range(depth):
        lists = [lists]
    array = {"type": "array", "default": lists}
    return {"type": "object", "description": '"', "properties": {"a": array}, "title": "t"}


@pytest.mark.parametrize("depth", [70, 300])
async def test_a_utf16_body_nested_past_the_limit_is_refused(
    http: httpx.AsyncClient, catalog: Catalog, upstream: UpstreamServer, depth: int
) -> None:
    # Nested in a tool's JSON schema, which goes to the provider as it is: 70 levels (past
    # the limit of 64) were taken, and 300 a 500 from the request's serialization.
    profile = catalog.profile("openai")
    schema = _hidden_nesting(depth)
    tool = {"type": "function", "function": {"name": "f", "parameters": schema}}
    chat = [{"role": "user", "content": "hi"}]
    request = {"messages": chat, "tools": [{"name": "f", "parameters": schema}]}
    calls = upstream.state.stats.total
    for path, body in (
        ("/v1/chat/completions", {"model": profile, "messages": chat, "tools": [tool]}),
        ("/gateway/invoke", {"profileId": profile, "request": request}),
    ):
        resp = await _post(http, catalog.auth, path, _encoded(body, "", "utf-16-le"))
        assert "must be UTF-8" in _refused(resp, path, "body")
    assert upstream.state.stats.total == calls


async def test_a_string_that_is_not_text_met_at_the_requests_hash_is_refused_naming_it(
    http: httpx.AsyncClient,
    catalog: Catalog,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The line behind the request's checks: with api/text_bodies.py's scan blinded, a lone
    # surrogate reaches the request's hash, which was a 500 (UnicodeEncodeError).
    monkeypatch.setattr(text_bodies, "_SURROGATE_ESCAPE", re.compile(rb"(?!)"))
    profile = catalog.profile("openai")
    chat = [{"role": "user", "content": "TEXT"}]
    calls = upstream.state.stats.total
    for path, body, field in (
        ("/v1/chat/completions", {"model": profile, "messages": chat}, "body.messages.0.content"),
        (
            "/v1/messages",
            {"model": profile, "max_tokens": 20, "messages": chat},
            "body.messages.0.content",
        ),
        ("/v1/embeddings", {"model": profile, "input": ["TEXT"]}, "body.input.0"),
        (
            "/gateway/invoke",
            {"profileId": profile, "request": {"messages": chat}},
            "body.request.messages.0.content",
        ),
    ):
        resp = await _post(http, catalog.auth, path, _encoded(body, LONE, "utf-8"))
        # As the request's checks refuse it: 400 on the SDK surfaces, 422 on the gateway's.
        status = 400 if path.startswith("/v1/") else 422
        assert "not text" in _refused(resp, path, field, status)
    assert await receipt_count(sessions, tenant) == 0
    assert upstream.state.stats.total == calls


async def test_the_text_check_walks_a_body_it_cannot_scan_as_utf8() -> None:
    # Its scan for a surrogate escape reads the bytes as UTF-8; api/limits.py refuses any other
    # JSON body first, and this check no longer counts on that.
    body = _encoded({"a": ["TEXT"]}, LONE, "utf-16-le")

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    headers = [(b"content-type", b"application/json")]
    scope = {"type": "http", "method": "POST", "path": "/x", "headers": headers}
    with pytest.raises(RequestValidationError) as refused:
        await text_bodies.refuse_what_is_not_text(Request(scope, receive))
    assert refused.value.errors()[0]["loc"] == ("body", "a", 0)


def test_canonical_json_names_where_a_string_is_not_text() -> None:
    from domain.hashing import canonical_json
    from domain.text import NotText

    with pytest.raises(NotText) as raised:
        canonical_json({"ok": "😀", "messages": [{"content": "cut \ud83d"}]})
    assert raised.value.where == ("messages", 0, "content")
    assert isinstance(raised.value, ValueError)  # what caught the UnicodeEncodeError still does
    assert "\ud83d" not in str(raised.value) and "messages" not in str(raised.value)
    assert canonical_json({"b": "😀", "a": 1}) == '{"a":1,"b":"😀"}'.encode()


def _multipart(fields: dict[str, str], charset: str | None) -> tuple[bytes, dict[str, str]]:
    boundary = "b0undary"
    parts = "".join(
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
        for name, value in fields.items()
    )
    declared = f"; charset={charset}" if charset else ""
    content_type = f"multipart/form-data; boundary={boundary}{declared}"
    return f"{parts}--{boundary}--\r\n".encode("ascii"), {"content-type": content_type}


async def test_a_multipart_form_declaring_utf7_is_refused_at_the_token_endpoint(
    http: httpx.AsyncClient, cli_env: dict[str, str], token_for: Any, tenant: str
) -> None:
    grant = {"grant_type": "client_credentials"}
    lone = {**grant, "client_id": UTF7_LONE, "client_secret": UTF7_LONE}
    for fields in (lone, {**lone, "client_secret": "x"}, {**lone, "client_id": "x"}):
        content, headers = _multipart(fields, "utf-7")
        resp = await http.post("/oauth/token", content=content, headers=headers)
        assert resp.status_code == 400, resp.text
        assert resp.json()["error"] == "invalid_request", resp.text  # OAuth's (RFC 6749 §5.2)
        assert "UTF-8" in resp.json()["error_description"]
        assert resp.headers["cache-control"] == "no-store"
    # Elsewhere, the request's validation error naming the body.
    content, headers = _multipart({"deploymentId": UTF7_LONE}, "UTF-7")
    auth = {"Authorization": f"Bearer {await token_for(tenant)}", "Idempotency-Key": "k-7"}
    resp = await http.post("/factory/model-deployments", content=content, headers=headers | auth)
    assert "UTF-8" in _refused(resp, "/factory/model-deployments", "body")
    # A form in UTF-8 (declared or not) or in ASCII is taken; so is an urlencoded form whatever
    # charset it declares (Apache HttpClient declares ISO-8859-1): it is never read by it.
    mine = {"client_id": cli_env["MODEL_ROUTER_CLIENT_ID"]}
    mine["client_secret"] = cli_env["MODEL_ROUTER_CLIENT_SECRET"]
    for charset in (None, "utf-8", "UTF8", "us-ascii"):
        content, headers = _multipart({**grant, **mine}, charset)
        taken = await http.post("/oauth/token", content=content, headers=headers)
        assert taken.status_code == 200, (charset, taken.text)
    latin = {"content-type": "application/x-www-form-urlencoded; charset=ISO-8859-1"}
    taken = await http.post("/oauth/token", data={**grant, **mine}, headers=latin)
    assert taken.status_code == 200, taken.text


async def test_a_client_id_or_secret_that_is_not_text_is_an_unknown_client(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    from api.client_auth import authenticate

    def no_store() -> Any:
        raise AssertionError("the store was asked for a client id that is not text")

    # Half of a surrogate pair cannot be sent to PostgreSQL: the lookup was a 500.
    assert await authenticate(cast(Any, no_store), "\ud800", "secret") is None
    assert await authenticate(cast(Any, no_store), "a\x00b", "secret") is None
    # Nor hashed with scrypt: the check was a 500 too.
    assert await authenticate(sessions, "nobody", "\ud800") is None
    assert not verify_secret("\ud800", hash_secret("s3cret"))
    assert verify_secret("s3cret", hash_secret("s3cret"))


def _page(resp: httpx.Response, status: int) -> str:
    assert resp.status_code == status, resp.text[:300]
    assert resp.headers["content-type"].startswith("text/html"), resp.headers["content-type"]
    return resp.text


async def test_console_forms_declaring_utf7_are_refused_with_a_page(
    api_url: str, cli_env: dict[str, str], catalog: Catalog
) -> None:
    console, answer = await ConsoleSession.sign_in(
        api_url, cli_env["MODEL_ROUTER_CLIENT_ID"], cli_env["MODEL_ROUTER_CLIENT_SECRET"]
    )
    assert answer.status_code == 303, answer.text
    try:
        for path, fields in (
            ("/console/preview", {"csrf_token": UTF7_LONE, "profile_id": "p"}),
            ("/console/sign-out", {"csrf_token": UTF7_LONE}),
            ("/console/sign-in", {"client_id": "x", "client_secret": "y", "login_nonce": "n"}),
        ):
            content, headers = _multipart(fields, "utf-7")
            resp = await console.http.post(path, content=content, headers=headers)
            assert "must be UTF-8" in _page(resp, 400), path
        # Still signed in: the sign-out was not taken.
        assert (await console.get("/console/schedules")).status_code == 200
    finally:
        await console.close()


async def test_a_csrf_token_or_nonce_that_is_not_ascii_text_is_not_the_sessions() -> None:
    class Posted:
        def __init__(self, token: str) -> None:
            self.token = token

        async def form(self) -> dict[str, str]:
            return {"csrf_token": self.token}

    principal = Principal("c", "t", frozenset(), frozenset())
    operator = Operator(principal, "a" * 64)
    for token in ("\ud800", "é", "b" * 64):
        with pytest.raises(ConsoleError) as refused:
            await check_csrf(cast(Request, Posted(token)), operator)
        assert refused.value.status == 403
    assert await check_csrf(cast(Request, Posted("a" * 64)), operator) is operator
    from api.console.session import same_token  # the sign-in form's nonce is compared so too

    assert not same_token("\ud800", "nonce") and not same_token(None, "nonce")
    assert same_token("nonce", "nonce")
