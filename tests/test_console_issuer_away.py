"""The console with an external issuer (RS256) whose key set cannot be fetched: the session
cannot be checked, and the page says so (a 503 the operator can retry) rather than the error
page's own second look at the session failing the same way, which was a 500 with no page."""

from __future__ import annotations

import time

import httpx
import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

from core.local_ports import free_port
from core.settings import Settings
from tests.helpers.stack import serve


def _token() -> str:
    """A well-formed RS256 token naming a key only the issuer could vouch for."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = int(time.time())
    claims = {
        "iss": "https://idp.example",
        "aud": "mr",
        "sub": "svc",
        "tid": "t-ext",
        "scope": "factory.models.admin",
        "iat": now,
        "exp": now + 600,
    }
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k1"})


async def test_a_session_its_issuer_cannot_vouch_for_is_a_503_page(settings: Settings) -> None:
    # Nothing listens where the key set should be: every fetch is refused.
    own = settings.model_copy(
        update={
            "auth_algorithm": "RS256",
            "auth_jwks_url": f"http://127.0.0.1:{free_port()}/jwks.json",
            "auth_issuer": "https://idp.example",
            "auth_audience": "mr",
            "auth_jwks_timeout_seconds": 1.0,
            # An API of its own without Temporal: these pages never reach it.
            "temporal_address": f"127.0.0.1:{free_port()}",
            "temporal_connect_timeout_seconds": 1.0,
        }
    )
    bearer = {"Authorization": f"Bearer {_token()}"}  # as an SSO proxy in front adds it
    async with serve(own) as api, httpx.AsyncClient(base_url=api.url, timeout=30) as http:
        for path in ("/console", "/console/overview"):
            resp = await http.get(path, headers=bearer)
            assert resp.status_code == 503, (path, resp.status_code, resp.text[:300])
            assert resp.headers["content-type"].startswith("text/html")
            assert "issuer cannot be reached" in resp.text
            # No operator could be named: no navigation, no sign-out form.
            assert "/console/sign-out" not in resp.text
        # The API's own answer to the same token stays its problem+json 503.
        api_answer = await http.get("/factory/model-deployments", headers=bearer)
        assert api_answer.status_code == 503
        assert api_answer.headers["content-type"] == "application/problem+json"
