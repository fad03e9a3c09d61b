"""Sign-in and sign-out: an OAuth client's id and secret in, the session cookie out; signing
out ends the session's token for good (store/console_sessions.py), not only the cookie.

The sign-in form has its own CSRF guard (a random value in a cookie and in the form, compared
on POST), so another site cannot sign a browser into an attacker's session. Its secret check is
the token endpoint's, behind the same bounds (api/client_auth.py): a sign-in turned away before
it is shown again with a 503 (the line full) or a 429 (its address failing), and Retry-After."""

from __future__ import annotations

import logging
import secrets
from datetime import UTC, datetime
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from api.client_auth import SignInRefused
from api.client_auth import sign_in as check_client
from api.console.landing import landing
from api.console.render import SECURITY_HEADERS, page
from api.console.session import (
    COOKIE,
    LOGIN_COOKIE,
    PATH,
    Changing,
    ConsoleError,
    is_secure,
    same_token,
)
from api.deps import RuntimeDep
from core.security import credential_of, mint_token, mints_tokens
from store import console_sessions
from store.tables import OAuthClient

router = APIRouter()
log = logging.getLogger("model_router.console")


def _safe_next(value: str | None) -> str:
    # Only a path inside the console: never an absolute URL (open redirect).
    if value and value.startswith(PATH) and not value.startswith("//") and "\\" not in value:
        return value
    return PATH


def _after_sign_in(target: str, client: OAuthClient) -> str:
    # The console's own address (the form's default, and where opening /console is sent back
    # to) names no page in particular: the client's landing. Any other page is kept, its query
    # included, as a shared link named it.
    return landing(client.roles, client.scopes) if target in (PATH, f"{PATH}/") else target


EXTERNAL_ISSUER = (
    "This deployment verifies an external issuer's tokens: the console is reached through an "
    "SSO proxy in front of it that sends the issuer's token (Authorization: Bearer)."
)


def _sign_in_page(
    request: Request, next_path: str, error: str | None, status: int, client_id: str = ""
) -> Response:
    """The form, with the client id typed before when it is shown again (never the secret)."""
    nonce = secrets.token_urlsafe(24)
    response = page(
        request,
        "sign_in.html",
        None,
        title="Sign in",
        status=status,
        login_nonce=nonce,
        next_path=next_path,
        error=error,
        client_id=client_id,
    )
    response.set_cookie(
        LOGIN_COOKIE,
        nonce,
        max_age=600,
        path=PATH,
        httponly=True,
        samesite="strict",
        secure=is_secure(request),
    )
    return response


@router.get("/sign-in", response_class=HTMLResponse)
async def sign_in_form(request: Request, runtime: RuntimeDep, next: str | None = None) -> Response:
    # Said before anything is typed: with an external issuer the form cannot sign anyone in.
    said = None if mints_tokens(runtime.settings) else EXTERNAL_ISSUER
    return _sign_in_page(request, _safe_next(next), said, 200)


@router.post("/sign-in", response_class=HTMLResponse)
async def sign_in(
    request: Request,
    runtime: RuntimeDep,
    client_id: Annotated[str, Form(max_length=100)] = "",
    client_secret: Annotated[str, Form(max_length=500)] = "",
    login_nonce: Annotated[str, Form(max_length=100)] = "",
    next: Annotated[str, Form(max_length=2000)] = PATH,
) -> Response:
    target = _safe_next(next)
    cookie_nonce = request.cookies.get(LOGIN_COOKIE, "")
    if not login_nonce or not same_token(login_nonce, cookie_nonce):
        expired = "The sign-in form expired; please try again."
        return _sign_in_page(request, target, expired, 403, client_id)
    if not client_id or not client_secret:
        missing = "Enter the client id and the client secret."
        return _sign_in_page(request, target, missing, 400, client_id)
    if not mints_tokens(runtime.settings):
        return _sign_in_page(request, target, EXTERNAL_ISSUER, 503)
    address = request.client.host if request.client else None
    try:
        client = await check_client(runtime, address, client_id, client_secret)
    except SignInRefused as refused:
        wait = refused.retry_after
        response = _sign_in_page(
            request, target, f"{refused.said}; try again in {wait} s.", refused.status, client_id
        )
        response.headers["Retry-After"] = str(wait)
        return response
    if client is None:
        log.info("console sign-in refused")
        return _sign_in_page(
            request, target, "Sign-in failed: unknown client or wrong secret.", 401, client_id
        )
    token, ttl = mint_token(
        runtime.settings,
        client_id=client.client_id,
        tenant_id=client.tenant_id,
        roles=list(client.roles),
        scopes=list(client.scopes),
        credential=credential_of(client.secret_hash),
        # A console session: no API path takes it, and its sign-out ends it (core/security.py).
        console=True,
    )
    log.info("console sign-in: client %s of tenant %s", client.client_id, client.tenant_id)
    response = RedirectResponse(
        _after_sign_in(target, client), status_code=303, headers=SECURITY_HEADERS
    )
    # The cookie lives exactly as long as the token it holds.
    response.set_cookie(
        COOKIE,
        token,
        max_age=ttl,
        path=PATH,
        httponly=True,
        samesite="strict",
        secure=is_secure(request),
    )
    response.delete_cookie(LOGIN_COOKIE, path=PATH)
    return response


@router.post("/sign-out")
async def sign_out(request: Request, operator: Changing, runtime: RuntimeDep) -> Response:
    """Ends the session: the sign-in's token recorded as signed out (a copy of the cookie is
    refused from then on), then the cookie deleted. An SSO proxy's bearer token is not the
    console's to end (the proxy sends it again with the next request): the cookie, if any, is
    deleted, nothing else."""
    principal = operator.principal
    if principal.console and principal.token_id is not None and principal.expires_at is not None:
        await console_sessions.sign_out(
            runtime.sessions,
            principal.token_id,
            principal.tenant_id,
            datetime.fromtimestamp(principal.expires_at, UTC),
        )
        log.info(
            "console sign-out: client %s of tenant %s", principal.client_id, principal.tenant_id
        )
    response = RedirectResponse(f"{PATH}/sign-in", status_code=303, headers=SECURITY_HEADERS)
    response.delete_cookie(
        COOKIE, path=PATH, httponly=True, samesite="strict", secure=is_secure(request)
    )
    return response


def sign_in_redirect(next_path: str) -> Response:
    return RedirectResponse(
        f"{PATH}/sign-in?next={quote(next_path)}", status_code=303, headers=SECURITY_HEADERS
    )


__all__ = ["ConsoleError", "router", "sign_in_redirect"]
