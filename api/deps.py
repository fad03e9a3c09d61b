"""FastAPI dependencies: settings, sessions, Temporal, the caller and what it may do."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Annotated, Any

from fastapi import Depends, Request
from sqlalchemy.ext.asyncio import AsyncSession
from temporalio.client import Client

from api.client_states import still_valid
from api.limits import VERIFIED
from api.problems import Problem
from api.runtime import Runtime
from core.jwks import RETRY_SECONDS, IssuerUnreachable
from core.logging import bind
from core.security import Principal, TokenError
from core.settings import Settings
from domain.access import Action, may, roles_for
from domain.enums import Scope


# Dependencies are `async def`: FastAPI runs a plain `def` dependency in its thread pool, a
# thread hop per dependency per request (the invoke path had four).
async def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


async def get_settings_dep(runtime: RuntimeDep) -> Settings:
    return runtime.settings


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]


async def get_session(runtime: RuntimeDep) -> AsyncIterator[AsyncSession]:
    async with runtime.sessions() as session:
        yield session


SessionDep = Annotated[AsyncSession, Depends(get_session)]


async def get_temporal(runtime: RuntimeDep) -> Client:
    client = await runtime.temporal()
    if client is None:
        raise Problem(
            503, "Temporal is not reachable; try again shortly.", headers={"Retry-After": "5"}
        )
    return client


TemporalDep = Annotated[Client, Depends(get_temporal)]

_BEARER = {"WWW-Authenticate": 'Bearer realm="model-router"'}


async def get_principal(request: Request, runtime: RuntimeDep) -> Principal:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Problem(401, "A bearer token is required.", headers=_BEARER)
    return await _verified(token.strip(), runtime, request)


async def get_principal_or_api_key(request: Request, runtime: RuntimeDep) -> Principal:
    """The same token, also accepted as `x-api-key` (what the anthropic SDK sends by default)
    when there is no Authorization header."""
    key = request.headers.get("x-api-key", "").strip()
    if key and "authorization" not in request.headers:
        return await _verified(key, runtime, request)
    return await get_principal(request, runtime)


async def _verified(token: str, runtime: Runtime, request: Request) -> Principal:
    seen = request.scope.get("state", {}).get(VERIFIED)
    if seen is not None and seen[0] == token:
        # The limits middleware verified this very token moments ago, with the same settings.
        principal: Principal = seen[1]
    else:
        try:
            principal = await runtime.verifier.verify_from_loop(token)
        except TokenError:
            raise invalid_token() from None
        except IssuerUnreachable:
            # Not the caller's fault: its token names a key only the issuer can say is good.
            raise issuer_unreachable() from None
    # A token minted before its client was disabled or re-keyed (api/client_states.py).
    if not await still_valid(runtime, principal):
        raise invalid_token()
    bind(tenant=principal.tenant_id)  # the verified tenant, for this request's log lines
    return principal


def invalid_token() -> Problem:
    """A token that does not verify: the route's 401, and the limits middleware's for a large
    body (api/limits.py)."""
    return Problem(
        401,
        "The bearer token is invalid or expired.",
        headers={"WWW-Authenticate": 'Bearer realm="model-router", error="invalid_token"'},
    )


def issuer_unreachable() -> Problem:
    return Problem(
        503,
        "The key the token is signed with could not be had from its issuer just now (it did "
        "not answer, or was asked moments ago); nothing was done. Retry after the indicated "
        "delay.",
        type_="https://model-router.dev/problems/issuer-unreachable",
        headers={"Retry-After": str(math.ceil(RETRY_SECONDS))},
        reason="issuer-unreachable",
    )


def holds(principal: Principal, scope: str, action: Action) -> bool:
    """Whether the caller holds the scope and a role allowed to take the action: what `require`
    demands, for a route that serves more to whom holds more."""
    return scope in principal.scopes and may(principal.roles, action)


def require(
    scope: str,
    action: Action,
    caller: Callable[..., Coroutine[Any, Any, Principal]] = get_principal,
) -> Callable[[Principal], Coroutine[Any, Any, Principal]]:
    """The caller must hold the scope (in its token) and a role allowed to take the action."""

    async def check(principal: Principal) -> Principal:
        if scope not in principal.scopes:
            raise Problem(
                403,
                f"The token lacks the scope {scope}.",
                headers={"WWW-Authenticate": f'Bearer error="insufficient_scope", scope="{scope}"'},
                requiredScope=scope,
            )
        if not may(principal.roles, action):
            allowed = ", ".join(sorted(roles_for(action)))
            raise Problem(403, f"This action needs one of the roles: {allowed}.")
        return principal

    # Set as an object: this module's annotations are strings, resolved in its globals, where
    # the chosen source of the caller is not.
    check.__annotations__["principal"] = Annotated[Principal, Depends(caller)]
    return check


# An invoking caller whose token may also come as `x-api-key` (what Anthropic's examples and
# some anthropic SDKs send): the Messages surface, and `/v1/models`, which both SDKs ask.
ApiKeyInvoker = Annotated[
    Principal, Depends(require(Scope.MODELS_INVOKE, Action.INVOKE, get_principal_or_api_key))
]
