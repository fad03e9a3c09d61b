"""OAuth2 client-credentials token endpoint (RFC 6749 §4.4).

Errors use the RFC's `error` codes inside a problem+json body, so OAuth clients and
problem-aware clients both understand them. A sign-in turned away before its secret is checked
(api/client_auth.py: the line for a check full, or its address failing too often) is
`temporarily_unavailable` (503) or `slow_down` (429), with Retry-After.
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import JSONResponse

from api.client_auth import SignInRefused, sign_in
from api.deps import RuntimeDep
from api.problems import problem_response
from core.security import credential_of, mint_token, mints_tokens

router = APIRouter(tags=["auth"])


def _oauth_error(
    request: Request, status: int, error: str, description: str, retry_after: int | None = None
) -> JSONResponse:
    headers = {"Cache-Control": "no-store"}
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    if error == "invalid_client":
        headers["WWW-Authenticate"] = 'Basic realm="model-router"'
    return problem_response(
        request,
        status,
        description,
        type_=f"https://model-router.dev/problems/oauth/{error}",
        headers=headers,
        error=error,
        error_description=description,
    )


def _basic_credentials(request: Request) -> tuple[str, str] | None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(value, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    client_id, sep, secret = decoded.partition(":")
    return (client_id, secret) if sep else None


@router.post("/oauth/token", response_model=None)
async def token(
    request: Request,
    runtime: RuntimeDep,
    grant_type: Annotated[str, Form()],
    scope: Annotated[str | None, Form()] = None,
    client_id: Annotated[str | None, Form()] = None,
    client_secret: Annotated[str | None, Form()] = None,
) -> JSONResponse:
    settings = runtime.settings
    if grant_type != "client_credentials":
        return _oauth_error(
            request, 400, "unsupported_grant_type", "grant_type must be client_credentials"
        )
    if not mints_tokens(settings):
        # Minted anyway, its token was a 401 on every route (RS256 mode), or a 500 without a
        # secret: the CLI said 401 after a token it was given, with no hint why.
        return _oauth_error(
            request,
            400,
            "unsupported_grant_type",
            "this deployment verifies an external issuer's tokens; get one from that issuer",
        )
    creds = _basic_credentials(request) or (
        (client_id, client_secret) if client_id and client_secret else None
    )
    if creds is None:
        return _oauth_error(request, 401, "invalid_client", "client authentication is required")
    cid, secret = creds
    try:
        client = await sign_in(
            runtime, request.client.host if request.client else None, cid, secret
        )
    except SignInRefused as refused:
        return _oauth_error(
            request, refused.status, refused.oauth_error, str(refused), refused.retry_after
        )
    if client is None:
        return _oauth_error(request, 401, "invalid_client", "client authentication failed")

    allowed = list(client.scopes)
    requested = scope.split() if scope else allowed
    not_allowed = [s for s in requested if s not in allowed]
    if not_allowed:
        return _oauth_error(
            request,
            400,
            "invalid_scope",
            f"scope not allowed for this client: {' '.join(not_allowed)}",
        )
    access_token, ttl = mint_token(
        settings,
        client_id=client.client_id,
        tenant_id=client.tenant_id,
        roles=list(client.roles),
        scopes=requested,
        credential=credential_of(client.secret_hash),
    )
    return JSONResponse(
        {
            "access_token": access_token,
            "token_type": "Bearer",
            "expires_in": ttl,
            "scope": " ".join(requested),
        },
        headers={"Cache-Control": "no-store", "Pragma": "no-cache"},
    )
