"""Who may do what: the role side of authorization (scopes are checked at the edge)."""

from __future__ import annotations

from enum import StrEnum

from domain.enums import Role


class Action(StrEnum):
    READ_CATALOG = "read-catalog"
    READ_DEPLOYMENTS = "read-deployments"
    MANAGE_DEPLOYMENTS = "manage-deployments"
    READ_RUNS = "read-runs"
    INVOKE = "invoke"


_ALLOWED: dict[Action, frozenset[Role]] = {
    Action.READ_CATALOG: frozenset(Role),
    # The spec lists deployments for Platform admins and Observers; Operators run ModelOps.
    Action.READ_DEPLOYMENTS: frozenset({Role.PLATFORM_ADMIN, Role.OPERATOR, Role.OBSERVER}),
    Action.MANAGE_DEPLOYMENTS: frozenset({Role.PLATFORM_ADMIN, Role.OPERATOR}),
    Action.READ_RUNS: frozenset(
        {Role.PLATFORM_ADMIN, Role.OPERATOR, Role.OBSERVER, Role.REQUESTER}
    ),
    Action.INVOKE: frozenset({Role.REQUESTER, Role.PLATFORM_ADMIN, Role.OPERATOR}),
}


def may(roles: frozenset[Role] | set[Role], action: Action) -> bool:
    return bool(_ALLOWED[action] & set(roles))


def roles_for(action: Action) -> frozenset[Role]:
    return _ALLOWED[action]
