"""OAuth2 client-credentials token endpoint (RFC 6749 §4.4).

Errors use the RFC's `error` codes inside a problem+json body, so OAuth clients and
problem-aware clients both understand them. A sign-in turned away before its secret is checked
(api/client_auth.py: the line for a check full, or its address failing too often) is
`temporarily_unavailable` (503) or `slow_down` (429), with Retry-After. A request FastAPI
cannot validate (a field missing, a file where a text belongs, a form that does not parse) is
§5.2's 400 `invalid_request` naming the field, not the app's 422 validation problem: an OAuth
client reads `error`, and the RFC says 400.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Coroutine
from typing import Annotated, Any

from fastapi import APIRouter, Form, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

from api.client_auth import SignInRefused, sign_in
from api.deps import RuntimeDep
from api.problems import problem_response
from core.security import credential_of, mint_token, mints_tokens

# What RFC 6749 lets an `error_description` hold (§5.2: printable ASCII but `"` and `\\`).
_NOT_DESCRIPTION = re.compile(r"[^\x20-\x21\x23-\x5b\x5d-\x7e]")


class _OAuthRoute(APIRoute):
    """The token endpoint with its own request validation answered in OAuth's terms. Its
    refusals before the handler are FastAPI's: the form read (Starlette's 400 for a multipart
    body it cannot parse) and the fields validated (a RequestValidationError). Scoped to this
    route: the app-wide handlers (api/problems.py) stay the problem+json of every other path."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()
        # The form's own field names: only these are told back (a loc may name what the caller
        # sent, e.g. a JSON body's keys refused by api/text_bodies.py, in any characters).
        fields = frozenset(str(f.alias) for f in self.dependant.body_params)

        async def handler(request: Request) -> Response:
            try:
                return await handle(request)
            except RequestValidationError as exc:
                described = "; ".join(dict.fromkeys(_said(e, fields) for e in exc.errors()))
                return _oauth_error(request, 400, "invalid_request", described)
            except HTTPException as exc:
                if exc.status_code != 400:
                    raise
                why = _NOT_DESCRIPTION.sub("", str(exc.detail))
                return _oauth_error(request, 400, "invalid_request", f"body is not a form: {why}")

        return handler


def _said(error: Any, fields: frozenset[str]) -> str:
    loc = tuple(error.get("loc", ()))
    field = str(loc[1]) if len(loc) == 2 and loc[1] in fields else "body"
    if error.get("type") == "missing":
        return f"{field} is required"
    # A form field is text or a file part; anything else here (a lone surrogate) is not text.
    return f"{field} must be text"


router = APIRouter(tags=["auth"], route_class=_OAuthRoute)


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


@router.post(
    "/oauth/token",
    response_model=None,
    responses={
        400: {
            "description": "RFC 6749 5.2: `invalid_request` (a field missing or not text, a "
            "form that does not parse), `unsupported_grant_type` or `invalid_scope`"
        },
        401: {"description": "`invalid_client`"},
    },
)
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
