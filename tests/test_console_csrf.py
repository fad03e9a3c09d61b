"""A console form rendered by one API process is taken by another (api/console/session.py).

With an external issuer (RS256) there is no signing secret, and the CSRF token was an HMAC keyed
on a key random per process: with two replicas, or API_WORKERS > 1, half the console's posts
were refused (403). The token is now a hash of the session's token, the same in every process.
The second process here is a real one, as another replica is: two apps in this process would
have shared the per-process key and hidden the fault."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from core.local_ports import free_port
from core.settings import Settings
from tests.helpers.deadline import eventually
from tests.helpers.process import Proc
from tests.helpers.stack import serve

ISSUER, AUDIENCE = "https://idp.example", "mr"


@pytest.fixture
def issuer() -> Iterator[tuple[str, rsa.RSAPrivateKey]]:
    """An external issuer's JWKS over HTTP, and the key it signs with."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    body = json.dumps({"keys": [{**jwk, "kid": "k1", "use": "sig", "alg": "RS256"}]}).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/jwks.json", key
    finally:
        server.shutdown()


def _bearer(key: rsa.RSAPrivateKey, tenant: str) -> dict[str, str]:
    """What an SSO proxy in front of the console adds to each request."""
    now = int(time.time())
    claims = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "operator@example",
        "tid": tenant,
        "roles": ["PlatformAdmin"],
        "scope": "factory.models.read factory.models.admin",
        "iat": now,
        "exp": now + 600,
    }
    token = jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k1"})
    return {"Authorization": f"Bearer {token}"}


def _csrf(html: str) -> str:
    marker = 'name="csrf_token" value="'
    start = html.index(marker) + len(marker)
    return html[start : html.index('"', start)]


async def test_a_form_rendered_by_one_process_is_taken_by_another(
    settings: Settings, issuer: tuple[str, rsa.RSAPrivateKey], tenant: str
) -> None:
    jwks_url, key = issuer
    dead_temporal = f"127.0.0.1:{free_port()}"  # the pages used never reach Temporal
    own = settings.model_copy(
        update={
            "auth_algorithm": "RS256",
            "auth_jwks_url": jwks_url,
            "auth_issuer": ISSUER,
            "auth_audience": AUDIENCE,
            "auth_jwt_secret": None,
            "temporal_address": dead_temporal,
            "temporal_connect_timeout_seconds": 1.0,
        }
    )
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("MODEL_ROUTER_")},
        "MODEL_ROUTER_ENVIRONMENT": "test",
        "MODEL_ROUTER_DATABASE_URL": settings.database_url,
        "MODEL_ROUTER_TEMPORAL_ADDRESS": dead_temporal,
        "MODEL_ROUTER_TEMPORAL_CONNECT_TIMEOUT_SECONDS": "1",
        "MODEL_ROUTER_AUTH_ALGORITHM": "RS256",
        "MODEL_ROUTER_AUTH_JWKS_URL": jwks_url,
        "MODEL_ROUTER_AUTH_ISSUER": ISSUER,
        "MODEL_ROUTER_AUTH_AUDIENCE": AUDIENCE,
        "MODEL_ROUTER_ARTIFACT_ROOT": str(settings.artifact_root),
    }
    argv = [sys.executable, "-m", "uvicorn", "--factory", "api.app:create_app"]
    other = Proc([*argv, "--host", "127.0.0.1", "--port", str(port)], env=env)
    bearer = _bearer(key, tenant)
    try:
        async with serve(own) as one, httpx.AsyncClient(timeout=30) as http:
            board = await http.get(f"{one.url}/console", headers=bearer)
            assert board.status_code == 200, board.text[:300]
            csrf = _csrf(board.text)

            async def up() -> bool:
                try:
                    answer = await http.get(f"http://127.0.0.1:{port}/healthz")
                except httpx.TransportError:
                    return False
                return answer.status_code == 200

            await eventually(up, timeout=60, interval=0.1)
            two = f"http://127.0.0.1:{port}"
            forged = await http.post(
                f"{two}/console/sign-out", data={"csrf_token": "0" * 64}, headers=bearer
            )
            assert forged.status_code == 403, forged.text[:300]
            taken = await http.post(
                f"{two}/console/sign-out", data={"csrf_token": csrf}, headers=bearer
            )
            assert taken.status_code == 303, (taken.status_code, taken.text[:300], other.output)
    finally:
        other.proc.send_signal(signal.SIGINT)
        other.wait(timeout=30)
