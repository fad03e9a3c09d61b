"""Who may do what: the role side of authorization (scopes are checked at the edge)."""

from __future__ import annotations

from enum import StrEnum

from domain.enums import Role


class Action(StrEnum):
    READ_CATALOG = "read-catalog"
    READ_DEPLOYMENTS = "read-deployments"
    MANAGE_DEPLOYMENTS = "manage-deployments"
    READ_RUNS = "read-runs"
    # Every run's receipts of the tenant at once and their sums (the console's receipts list
    # without a run, its overview): each project's run ids, idempotency keys, request hashes
    # and spend. READ_RUNS is one run's, which its caller names by id, as a runtime knows its
    # own run (GET /factory/runs/{runId}/model-receipts, the only receipts read REST has).
    READ_TENANT_RECEIPTS = "read-tenant-receipts"
    INVOKE = "invoke"


_ALLOWED: dict[Action, frozenset[Role]] = {
    Action.READ_CATALOG: frozenset(Role),
    # The spec lists deployments for Platform admins and Observers; Operators run ModelOps.
    Action.READ_DEPLOYMENTS: frozenset({Role.PLATFORM_ADMIN, Role.OPERATOR, Role.OBSERVER}),
    Action.MANAGE_DEPLOYMENTS: frozenset({Role.PLATFORM_ADMIN, Role.OPERATOR}),
    Action.READ_RUNS: frozenset(
        {Role.PLATFORM_ADMIN, Role.OPERATOR, Role.OBSERVER, Role.REQUESTER}
    ),
    # The roles that watch the tenant's operations, as they list its deployments: a Requester
    # (a runtime's service identity) reads its own runs, not its neighbours'.
    Action.READ_TENANT_RECEIPTS: frozenset({Role.PLATFORM_ADMIN, Role.OPERATOR, Role.OBSERVER}),
    Action.INVOKE: frozenset({Role.REQUESTER, Role.PLATFORM_ADMIN, Role.OPERATOR}),
}


def may(roles: frozenset[Role] | set[Role], action: Action) -> bool:
    return bool(_ALLOWED[action] & set(roles))


def roles_for(action: Action) -> frozenset[Role]:
    return _ALLOWED[action]


def reading_receipts(*, of_one_run: bool) -> Action:
    """What a read of receipts takes: one run's, named by its id, the run's reader; any wider
    (every run of the tenant, or its sums), one who may read the tenant's receipts at large."""
    return Action.READ_RUNS if of_one_run else Action.READ_TENANT_RECEIPTS
