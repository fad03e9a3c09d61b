"""A malformed token request is answered as RFC 6749 §5.2 says: 400 `invalid_request` naming
the field (a missing grant_type, a file where a text belongs, a form that does not parse), not
the app's 422 validation problem an OAuth client does not read; an unknown grant_type stays
`unsupported_grant_type`, and a good request still gets its token."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from domain.enums import Role, Scope
from store.clients import upsert_client

GRANT = {"grant_type": "client_credentials"}


@pytest.fixture
async def client(sessions: async_sessionmaker[AsyncSession], tenant: str) -> tuple[str, str]:
    """A client of the test's tenant that may sign in: its id and secret."""
    await upsert_client(
        sessions,
        tenant_id=tenant,
        client_id=f"{tenant}-tok",
        secret="tok-secret-1",
        roles=[Role.OBSERVER],
        scopes=[Scope.MODELS_READ],
    )
    return f"{tenant}-tok", "tok-secret-1"


def _oauth_refusal(resp: httpx.Response, error: str) -> str:
    """The refusal's `error_description`, once its status, `error` and headers are OAuth's."""
    assert resp.status_code == 400, resp.text
    body = resp.json()
    assert body["error"] == error, body
    assert resp.headers["cache-control"] == "no-store"
    description = body["error_description"]
    assert isinstance(description, str)
    return description


async def test_a_missing_grant_type_is_invalid_request_naming_it(
    http: httpx.AsyncClient, client: tuple[str, str]
) -> None:
    # Signed in well, and without a grant_type: still the request's fault, not a token. An empty
    # value is no value (FastAPI reads `grant_type=` as missing).
    for data in ({}, {"scope": "factory.models.read"}, {"grant_type": ""}):
        resp = await http.post("/oauth/token", data=data, auth=client)
        assert "grant_type" in _oauth_refusal(resp, "invalid_request"), data
    # The credentials in the form are taken the same way.
    form = {"client_id": client[0], "client_secret": client[1]}
    resp = await http.post("/oauth/token", data=form)
    assert _oauth_refusal(resp, "invalid_request") == "grant_type is required"


async def test_a_field_of_the_wrong_type_or_a_body_that_is_no_form_is_invalid_request(
    http: httpx.AsyncClient, client: tuple[str, str]
) -> None:
    # A file part where the form's text belongs.
    for name in ("grant_type", "scope"):
        data = {} if name == "grant_type" else GRANT
        resp = await http.post(
            "/oauth/token", data=data, files={name: ("x.txt", b"client_credentials")}, auth=client
        )
        assert _oauth_refusal(resp, "invalid_request") == f"{name} must be text"
    # A multipart body without its boundary: Starlette's 400 for it, in OAuth's terms too.
    resp = await http.post(
        "/oauth/token",
        content=b"grant_type=client_credentials",
        headers={"content-type": "multipart/form-data"},
        auth=client,
    )
    assert _oauth_refusal(resp, "invalid_request").startswith("body is not a form")


async def test_an_unknown_grant_type_is_unsupported_and_a_good_request_gets_its_token(
    http: httpx.AsyncClient, client: tuple[str, str]
) -> None:
    resp = await http.post("/oauth/token", data={"grant_type": "password"}, auth=client)
    assert "client_credentials" in _oauth_refusal(resp, "unsupported_grant_type")
    resp = await http.post("/oauth/token", data=GRANT, auth=client)
    assert resp.status_code == 200, resp.text
    assert resp.json()["token_type"] == "Bearer" and resp.json()["access_token"]
    assert resp.json()["scope"] == "factory.models.read"
