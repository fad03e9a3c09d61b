"""The console's session: a cookie holding the token the sign-in minted, and the CSRF token
every state-changing form carries.

The cookie's token carries what `/oauth/token` would hand the same client (same tenant, roles
and scopes), so the console can be no more powerful than the API, and the session ends at the
token's `exp` at the latest. It is marked a console session (`use: console`, core/security.py):
no /v1 or /factory path takes it, so a copied cookie is no API token, and its sign-out ends it
(its `jti` recorded, store/console_sessions.py; before, the cookie was only deleted, and a copy
of it kept working on the console and on every API path until `exp`). The cookie holds nothing
else: an API token put there is no session. An SSO proxy's bearer token (an external issuer's,
or one `/oauth/token` minted) is not the console's to end: its sign-out only deletes the cookie
there is none of, and the token works until the proxy or its issuer stops sending it. The
cookie is HttpOnly (no script reads it), SameSite=Strict (no other site's page sends it), Secure
in production (whatever scheme the request reports) or when served over TLS, and scoped to
/console.

The CSRF token every form carries is a hash of the session's token (the cookie's, or the bearer
token an SSO proxy adds): stateless, different per session, and the same in every API process
and after any restart, keyed on nothing a process holds. It was an HMAC keyed on the signing
secret, or, without one (an external issuer's tokens, RS256), on a key random per process: with
two replicas or API_WORKERS > 1 half the console's posts were refused. A keyed HMAC adds nothing
here: its input, the session's token, is itself the secret, which a page of another site can
neither read (HttpOnly, or held by the proxy) nor derive from the hash. Chosen over a
double-submit cookie, which would also be process-independent: a cookie's value can be planted
by a sibling subdomain, the token cannot; and the hash needs no second cookie.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from api.client_states import still_valid
from api.deps import RuntimeDep
from api.runtime import Runtime
from core.jwks import IssuerUnreachable
from core.security import Principal, TokenError
from domain.access import Action, may, roles_for
from store import console_sessions

COOKIE = "mr_console"
LOGIN_COOKIE = "mr_console_login"
PATH = "/console"
CSRF_FIELD = "csrf_token"
_CSRF_LABEL = b"model-router console csrf\x00"


class SignInRequired(Exception):
    """No session, or it expired: the handler sends the browser to the sign-in page."""

    def __init__(self, next_path: str) -> None:
        super().__init__(next_path)
        self.next_path = next_path


class ConsoleError(Exception):
    """A page-level refusal (403, 404, …), rendered as an HTML page with the reason."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Operator:
    """The signed-in client, with the CSRF token its forms must echo."""

    principal: Principal
    csrf: str

    @property
    def tenant_id(self) -> str:
        return self.principal.tenant_id

    def may(self, scope: str, action: Action) -> bool:
        """The API's rule (api/deps.require): the scope in the token and a role for the action."""
        return scope in self.principal.scopes and may(self.principal.roles, action)

    def needs(self, action: Action) -> str:
        """What a refused button says."""
        return "needs the role " + " or ".join(sorted(roles_for(action)))


def csrf_for(token: str) -> str:
    """The CSRF token of the session whose token this is."""
    return hashlib.sha256(_CSRF_LABEL + token.encode()).hexdigest()


def is_secure(request: Request) -> bool:
    """Whether the console's cookies are Secure: always in production, where the session
    cookie (a console session with all its client's scopes) must never travel over plain HTTP,
    whatever scheme the request reports (behind a TLS-terminating proxy it is "http" unless
    uvicorn trusts the proxy's X-Forwarded-Proto, and the shipped manifests leave that off);
    elsewhere when served over TLS (`make dev` and the tests sign in over plain HTTP)."""
    production: bool = request.app.state.runtime.settings.environment == "production"
    return production or request.url.scheme == "https"


async def signed_in(request: Request, runtime: RuntimeDep) -> Operator:
    """The console's operator: from the sign-in cookie, or else from the bearer token an SSO
    proxy in front adds to every request (the only way in with an external issuer, whose tokens
    the sign-in form cannot mint; the form's page says so)."""
    token = request.cookies.get(COOKIE, "")
    from_cookie = bool(token)
    if not token:
        scheme, _, bearer = request.headers.get("authorization", "").partition(" ")
        token = bearer.strip() if scheme.lower() == "bearer" else ""
    if token:
        try:
            principal: Principal | None = await runtime.verifier.verify_from_loop(
                token, console=True
            )
        except TokenError:
            principal = None
        except IssuerUnreachable:
            raise ConsoleError(
                503, "The sign-in's issuer cannot be reached to check it; try again shortly."
            ) from None
        if principal is not None and from_cookie and not principal.console:
            principal = None  # the cookie holds the sign-in's token only
        if principal is not None and principal.console and not await _live(runtime, principal):
            principal = None  # signed out of
        # A session of a client disabled or re-keyed since: signed in again.
        if principal is not None and await still_valid(runtime, principal):
            return Operator(principal, csrf_for(token))
    # The whole address, query included: a shared link to one deployment or to one run's
    # receipts (`?id=…`, `?run_id=…`) signed in to a page with no id (a 422) or no filter.
    query = request.url.query
    path = request.url.path + (f"?{query}" if query else "")
    raise SignInRequired(path if request.method == "GET" else PATH)


async def _live(runtime: Runtime, principal: Principal) -> bool:
    """Whether a console session's token was not signed out of: one read by primary key. One
    with no id the sign-out could record is none (the sign-in's always has one)."""
    jti = principal.token_id
    if jti is None or not console_sessions.can_be_ended(jti):
        return False
    return not await console_sessions.signed_out(runtime.sessions, jti)


SignedIn = Annotated[Operator, Depends(signed_in)]


async def check_csrf(request: Request, operator: SignedIn) -> Operator:
    """Every state-changing form: the posted token must be this session's."""
    form = await request.form()
    if any(isinstance(v, str) and "\x00" in v for v in form.values()):
        # Its fields are ids and names looked up or stored: PostgreSQL refuses a NUL in a text
        # value, which was a 500 (SQLite took it).
        raise ConsoleError(400, "The form contains a NUL character.")
    if not same_token(form.get(CSRF_FIELD), operator.csrf):
        raise ConsoleError(403, "The form's CSRF token is missing or not this session's.")
    return operator


def same_token(given: object, expected: str) -> bool:
    """Whether a posted token (the CSRF token, the sign-in form's nonce) is the one expected,
    in constant time. Each is ASCII, so one that is not ASCII text is not it: compare_digest
    raises on a str that is not ASCII, and `.encode()` on half of a surrogate pair (a multipart
    form's declared UTF-7 gives one), each a 500."""
    if not isinstance(given, str) or not given.isascii():
        return False
    return hmac.compare_digest(given.encode("ascii"), expected.encode())


Changing = Annotated[Operator, Depends(check_csrf)]
