"""OAuth2 client credentials, bearer verification, scopes and roles."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from core.security import TokenError, TokenVerifier, hash_secret, verify_secret
from core.settings import Settings
from domain.enums import Role, Scope
from store.clients import upsert_client
from tests.conftest import TokenFactory


def test_secret_hash_round_trip() -> None:
    stored = hash_secret("s3cret")
    assert "s3cret" not in stored
    assert verify_secret("s3cret", stored)
    assert not verify_secret("wrong", stored)
    assert not verify_secret("s3cret", "garbage")


async def test_token_with_basic_auth_and_with_form_credentials(
    http: httpx.AsyncClient, sessions: async_sessionmaker[AsyncSession], tenant: str
) -> None:
    await upsert_client(
        sessions,
        tenant_id=tenant,
        client_id=f"{tenant}-c",
        secret="pw-123456",
        roles=[Role.OBSERVER],
        scopes=[Scope.MODELS_READ, Scope.RUNS_READ],
    )
    basic = await http.post(
        "/oauth/token", data={"grant_type": "client_credentials"}, auth=(f"{tenant}-c", "pw-123456")
    )
    assert basic.status_code == 200, basic.text
    body = basic.json()
    assert body["token_type"] == "Bearer" and body["expires_in"] > 0
    assert set(body["scope"].split()) == {"factory.models.read", "factory.runs.read"}
    assert basic.headers["cache-control"] == "no-store"

    form = await http.post(
        "/oauth/token",
        data={
            "grant_type": "client_credentials",
            "client_id": f"{tenant}-c",
            "client_secret": "pw-123456",
            "scope": "factory.models.read",
        },
    )
    assert form.status_code == 200
    assert form.json()["scope"] == "factory.models.read"


async def test_token_endpoint_refusals(
    http: httpx.AsyncClient, sessions: async_sessionmaker[AsyncSession], tenant: str
) -> None:
    await upsert_client(
        sessions,
        tenant_id=tenant,
        client_id=f"{tenant}-r",
        secret="right-secret",
        roles=[Role.REQUESTER],
        scopes=[Scope.MODELS_READ],
    )
    wrong = await http.post(
        "/oauth/token", data={"grant_type": "client_credentials"}, auth=(f"{tenant}-r", "nope")
    )
    unknown = await http.post(
        "/oauth/token", data={"grant_type": "client_credentials"}, auth=("no-such", "nope")
    )
    for resp in (wrong, unknown):
        assert resp.status_code == 401
        assert resp.json()["error"] == "invalid_client"
        assert resp.headers["content-type"] == "application/problem+json"

    grant = await http.post(
        "/oauth/token", data={"grant_type": "password"}, auth=(f"{tenant}-r", "right-secret")
    )
    assert grant.status_code == 400 and grant.json()["error"] == "unsupported_grant_type"

    scope = await http.post(
        "/oauth/token",
        data={"grant_type": "client_credentials", "scope": "factory.models.admin"},
        auth=(f"{tenant}-r", "right-secret"),
    )
    assert scope.status_code == 400 and scope.json()["error"] == "invalid_scope"

    missing = await http.post("/oauth/token", data={})
    assert missing.status_code == 422
    assert missing.json()["errors"][0]["field"] == "body.grant_type"


async def test_no_token_invalid_token_and_expired_token_are_401(
    http: httpx.AsyncClient, settings: Settings
) -> None:
    assert settings.auth_jwt_secret is not None
    key = settings.auth_jwt_secret.get_secret_value()
    now = int(time.time())
    expired = jwt.encode(
        {
            "iss": settings.auth_issuer,
            "aud": settings.auth_audience,
            "sub": "c",
            "tid": "t",
            "iat": now - 7200,
            "exp": now - 3600,
            "scope": "factory.models.read",
        },
        key,
        algorithm="HS256",
    )
    forged = jwt.encode(
        {
            "iss": settings.auth_issuer,
            "aud": settings.auth_audience,
            "sub": "c",
            "tid": "t",
            "iat": now,
            "exp": now + 60,
            "scope": "factory.models.read",
        },
        "not-the-key-not-the-key-not-the-key",
        algorithm="HS256",
    )
    for headers in (
        {},
        {"Authorization": "Bearer garbage"},
        {"Authorization": f"Bearer {expired}"},
        {"Authorization": f"Bearer {forged}"},
        {"Authorization": "Basic abc"},
    ):
        resp = await http.get("/factory/model-profiles", headers=headers)
        assert resp.status_code == 401, headers
        assert resp.headers["www-authenticate"].startswith("Bearer")
        assert resp.headers["content-type"] == "application/problem+json"


async def test_missing_scope_is_403_and_missing_role_is_403(
    http: httpx.AsyncClient, token_for: TokenFactory, tenant: str
) -> None:
    read_only = await token_for(tenant, roles=[Role.PLATFORM_ADMIN], scopes=[Scope.MODELS_READ])
    resp = await http.get(
        "/factory/model-deployments", headers={"Authorization": f"Bearer {read_only}"}
    )
    assert resp.status_code == 403
    assert resp.json()["requiredScope"] == "factory.models.admin"

    requester = await token_for(tenant, roles=[Role.REQUESTER], scopes=list(Scope))
    resp = await http.get(
        "/factory/model-deployments", headers={"Authorization": f"Bearer {requester}"}
    )
    assert resp.status_code == 403
    assert "roles" in resp.json()["detail"]

    observer = await token_for(tenant, roles=[Role.OBSERVER], scopes=list(Scope))
    auth = {"Authorization": f"Bearer {observer}"}
    assert (await http.get("/factory/model-deployments", headers=auth)).status_code == 200
    register = await http.post("/factory/model-deployments", headers=auth, json={})
    assert register.status_code == 403  # authorization is decided before the body is read


class _JWKS(BaseHTTPRequestHandler):
    body = b"{}"

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def jwks_server() -> Iterator[tuple[str, rsa.RSAPrivateKey]]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    jwk.update({"kid": "k1", "use": "sig", "alg": "RS256"})
    handler = type("H", (_JWKS,), {"body": json.dumps({"keys": [jwk]}).encode()})
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/jwks.json", key
    server.shutdown()


async def test_rs256_tokens_from_an_external_issuer_verify_against_jwks(
    settings: Settings, jwks_server: tuple[str, rsa.RSAPrivateKey]
) -> None:
    url, key = jwks_server
    rs = settings.model_copy(
        update={
            "auth_algorithm": "RS256",
            "auth_jwks_url": url,
            "auth_issuer": "https://idp.example",
            "auth_audience": "mr",
        }
    )
    verifier = TokenVerifier(rs)
    now = int(time.time())
    claims = {
        "iss": "https://idp.example",
        "aud": "mr",
        "sub": "svc",
        "tid": "t-ext",
        "roles": ["Observer", "NotARole"],
        "scope": "factory.models.read",
        "iat": now,
        "exp": now + 60,
    }
    good = jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k1"})
    principal = await asyncio.to_thread(verifier.verify, good)
    assert principal.tenant_id == "t-ext"
    assert principal.roles == {Role.OBSERVER}
    assert principal.scopes == {"factory.models.read"}

    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    bad = jwt.encode(claims, other_key, algorithm="RS256", headers={"kid": "k1"})
    with pytest.raises(TokenError):
        await asyncio.to_thread(verifier.verify, bad)
    no_tenant = jwt.encode({**claims, "tid": ""}, key, algorithm="RS256", headers={"kid": "k1"})
    with pytest.raises(TokenError):
        await asyncio.to_thread(verifier.verify, no_tenant)
