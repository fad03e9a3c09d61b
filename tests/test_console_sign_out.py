"""Signing out of the console ends the session, not only its cookie.

The cookie held the very token `/oauth/token` mints (every scope of the client), and sign-out
only deleted it: a copy (a shared workstation, a log) kept working for the token's lifetime,
on the console and as a bearer token on every /v1 and /factory path. Now the sign-in's token is
a console session (`use: console`), which no API path takes (a 401 in each surface's envelope,
as any bad token), and a sign-out records its `jti`, which the console refuses from then on.
An SSO proxy's bearer token is not the console's to end: its sign-out deletes nothing more."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import jwt
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col

from store.console_sessions import prune_expired
from store.db import transaction
from store.ops_tables import ConsoleSignOutRow
from tests.helpers.browser import ConsoleSession


async def _signed_in(api_url: str, cli_env: dict[str, str]) -> tuple[ConsoleSession, str]:
    """A console session signed in with the form, and its cookie's value."""
    session, answer = await ConsoleSession.sign_in(
        api_url, cli_env["MODEL_ROUTER_CLIENT_ID"], cli_env["MODEL_ROUTER_CLIENT_SECRET"]
    )
    assert answer.status_code == 303, answer.text[:300]
    cookie = session.http.cookies.get("mr_console")
    assert cookie and session.csrf
    return session, cookie


async def _oauth_token(http: httpx.AsyncClient, cli_env: dict[str, str]) -> str:
    resp = await http.post(
        "/oauth/token",
        data={"grant_type": "client_credentials"},
        auth=(cli_env["MODEL_ROUTER_CLIENT_ID"], cli_env["MODEL_ROUTER_CLIENT_SECRET"]),
    )
    assert resp.status_code == 200, resp.text
    return str(resp.json()["access_token"])


def _with_cookie(token: str) -> dict[str, str]:
    return {"Cookie": f"mr_console={token}"}


async def _signed_out_rows(
    sessions: async_sessionmaker[AsyncSession], jti: str
) -> list[tuple[str, datetime]]:
    c = ConsoleSignOutRow
    async with sessions() as session:
        rows = await session.execute(
            sa.select(col(c.tenant_id), col(c.expires_at)).where(col(c.jti) == jti)
        )
        return [(r.tenant_id, r.expires_at) for r in rows]


async def test_a_copy_of_the_cookie_is_no_session_once_signed_out(
    api_url: str,
    http: httpx.AsyncClient,
    cli_env: dict[str, str],
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
) -> None:
    session, cookie = await _signed_in(api_url, cli_env)
    claims = jwt.decode(cookie, options={"verify_signature": False})
    # A row of another session long expired: the sign-out deletes it on its way.
    stale = f"stale-{uuid.uuid4().hex}"
    async with transaction(sessions) as db:
        db.add(ConsoleSignOutRow(jti=stale, tenant_id=tenant, expires_at=datetime(2000, 1, 1)))
    try:
        # The copy works while the session lasts.
        assert (
            await http.get("/console/receipts", headers=_with_cookie(cookie))
        ).status_code == 200
        done = await session.post("/console/sign-out", {"csrf_token": session.csrf})
        assert done.status_code == 303 and done.headers["location"] == "/console/sign-in"
    finally:
        await session.close()
    # The copy kept after the sign-out is sent to the sign-in, as a cookie and as a bearer token.
    for headers in (_with_cookie(cookie), {"Authorization": f"Bearer {cookie}"}):
        bounced = await http.get("/console/receipts", headers=headers)
        assert bounced.status_code == 303, bounced.text[:300]
        assert bounced.headers["location"].startswith("/console/sign-in")
    # Its form posts too: the CSRF token it had is for a session that is over.
    again = await http.post(
        "/console/sign-out", data={"csrf_token": session.csrf}, headers=_with_cookie(cookie)
    )
    assert again.status_code == 303 and again.headers["location"].startswith("/console/sign-in")
    # What was recorded: the token's id, its tenant and its expiry; nothing of the token.
    assert await _signed_out_rows(sessions, claims["jti"]) == [
        (tenant, datetime.fromtimestamp(claims["exp"], UTC))
    ]
    assert await _signed_out_rows(sessions, stale) == []
    # The client signs in again to a new session.
    fresh, cookie_two = await _signed_in(api_url, cli_env)
    try:
        assert cookie_two != cookie
        assert (await fresh.get("/console/receipts")).status_code == 200
    finally:
        await fresh.close()


def _comparable(resp: httpx.Response) -> tuple[int, str, str, Any]:
    """An answer as a client sees it, the request's own id left out."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if "request" not in k.lower()}
        return value

    return (
        resp.status_code,
        resp.headers.get("content-type", ""),
        resp.headers.get("www-authenticate", ""),
        strip(resp.json()),
    )


async def test_the_console_cookie_is_no_api_token(
    api_url: str, http: httpx.AsyncClient, cli_env: dict[str, str]
) -> None:
    session, cookie = await _signed_in(api_url, cli_env)
    api_token = await _oauth_token(http, cli_env)
    try:
        # Each surface refuses it as it refuses any token that does not verify, in its envelope.
        calls: list[tuple[str, str, dict[str, Any] | None, str]] = [
            ("GET", "/factory/model-profiles", None, "authorization"),
            ("GET", "/factory/model-deployments", None, "authorization"),
            ("GET", "/v1/models", None, "authorization"),
            ("GET", "/v1/models", None, "x-api-key"),
            ("POST", "/v1/chat/completions", {"model": "m", "messages": []}, "authorization"),
            ("POST", "/v1/messages", {"model": "m", "max_tokens": 1, "messages": []}, "x-api-key"),
            ("POST", "/v1/responses", {"model": "m", "input": "hi"}, "authorization"),
            ("POST", "/gateway/invoke", {}, "authorization"),
        ]
        for method, path, body, header in calls:

            def sent(token: str, header: str = header) -> dict[str, str]:
                return {header: f"Bearer {token}" if header == "authorization" else token}

            refused = await http.request(method, path, json=body, headers=sent(cookie))
            bad = await http.request(method, path, json=body, headers=sent("not-a-token"))
            assert refused.status_code == 401, (path, refused.status_code, refused.text[:300])
            assert _comparable(refused) == _comparable(bad), path
        # The same client's /oauth/token token is an API token as before.
        for path in ("/factory/model-profiles", "/v1/models"):
            ok = await http.get(path, headers={"Authorization": f"Bearer {api_token}"})
            assert ok.status_code == 200, (path, ok.text[:300])
        # And the cookie is still the console's session.
        assert (await session.get("/console/receipts")).status_code == 200
    finally:
        await session.close()


async def test_a_bearer_session_signs_out_as_before_and_the_cookie_takes_no_api_token(
    api_url: str,
    http: httpx.AsyncClient,
    cli_env: dict[str, str],
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """An SSO proxy's bearer token (here one of /oauth/token) is the console's session while
    the proxy sends it: its sign-out records nothing and it keeps working, as before. Put in
    the cookie, an API token is no session: the cookie holds what the sign-in minted only."""
    api_token = await _oauth_token(http, cli_env)
    bearer = {"Authorization": f"Bearer {api_token}"}
    board = await http.get("/console", headers=bearer)
    assert board.status_code == 200, board.text[:300]
    csrf = board.text.split('name="csrf_token" value="', 1)[1].split('"', 1)[0]
    out = await http.post("/console/sign-out", data={"csrf_token": csrf}, headers=bearer)
    assert out.status_code == 303 and out.headers["location"] == "/console/sign-in"
    assert (await http.get("/console/receipts", headers=bearer)).status_code == 200
    jti = jwt.decode(api_token, options={"verify_signature": False})["jti"]
    assert await _signed_out_rows(sessions, jti) == []
    assert (await http.get("/factory/model-profiles", headers=bearer)).status_code == 200

    planted = await http.get("/console/receipts", headers=_with_cookie(api_token))
    assert planted.status_code == 303 and "/console/sign-in" in planted.headers["location"]


async def test_expired_sign_outs_are_deleted_oldest_first_a_batch_at_a_time(
    store: async_sessionmaker[AsyncSession],
) -> None:
    """The prune each sign-out runs, on both engines: rows past their token's expiry only,
    the oldest first, at most `limit` of them."""
    tag = uuid.uuid4().hex
    ancient = datetime(1980, 1, 1, tzinfo=UTC)
    expired = [f"{tag}-{n}" for n in range(3)]
    live = f"{tag}-live"
    async with transaction(store) as db:
        for n, jti in enumerate(expired):
            db.add(ConsoleSignOutRow(jti=jti, tenant_id="t", expires_at=ancient + timedelta(n)))
        db.add(
            ConsoleSignOutRow(
                jti=live, tenant_id="t", expires_at=datetime.now(UTC) + timedelta(hours=1)
            )
        )

    async def left() -> set[str]:
        async with store() as db:
            found = await db.execute(
                sa.select(col(ConsoleSignOutRow.jti)).where(
                    col(ConsoleSignOutRow.jti).startswith(tag)
                )
            )
            return set(found.scalars())

    async with transaction(store) as db:
        assert await prune_expired(db, datetime.now(UTC), 2) == 2
    assert await left() == {expired[2], live}
    async with transaction(store) as db:
        assert await prune_expired(db, datetime.now(UTC), 100) >= 1
    assert await left() == {live}
