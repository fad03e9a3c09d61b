"""The console's first page for a client: the first page its roles and scopes may read. The
board asks what a Requester lacks, and a Requester's first page, after signing in or through
an SSO proxy, was "Not allowed"."""

from __future__ import annotations

from collections.abc import Iterable

from api.console.session import PATH
from domain.access import Action, may
from domain.enums import Role, Scope

# Each page with what it checks: the board (deployments.check_read), Profiles
# (profiles._read), Receipts (receipts._read; its run id field opens a run's receipts to a
# client that may read runs only).
_LANDINGS: tuple[tuple[str, Scope, Action], ...] = (
    (PATH, Scope.MODELS_ADMIN, Action.READ_DEPLOYMENTS),
    (f"{PATH}/profiles", Scope.MODELS_READ, Action.READ_CATALOG),
    (f"{PATH}/receipts", Scope.RUNS_READ, Action.READ_RUNS),
)


def landing(roles: Iterable[str], scopes: Iterable[str]) -> str:
    """The first page these roles and scopes may read; with none, the board, whose refusal
    says what it needs."""
    # Roles as a token's are read (core/security.py): one this version does not know is none.
    known = {Role(r) for r in roles if r in Role._value2member_map_}
    held = set(scopes)
    for path, scope, action in _LANDINGS:
        if scope in held and may(known, action):
            return path
    return PATH
