"""Writes of the routing settings the planner reads beside the catalog rows: a tenant's policy
and its scoring weights (read back by `store/catalog_loader.py`). Each write bumps the catalog
version in the same transaction, so cached snapshots see it at once."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession

from domain.policy import TenantPolicy
from domain.scoring import Weights
from store import catalog_state
from store.routing_tables import TenantPolicyRow, TenantRoutingWeightsRow


class PolicyRevisionTaken(Exception):
    """The revision exists with other rules: a revision names one document, never two."""


async def put_policy(
    session: AsyncSession, tenant_id: str, revision: str, document: dict[str, Any]
) -> None:
    """Store the tenant's policy document under `revision` (the same document again is a
    no-op rewrite); raises PolicyRevisionTaken before writing anything (the caller's transaction
    is rolled back)."""
    # The catalog version's row first: it serialises every writer of routing settings, so a
    # concurrent first write of the tenant's policy waits here and then finds the row. Read
    # first, both inserted it and the second's unique violation was a 500.
    await catalog_state.bump(session)
    row = await session.get(TenantPolicyRow, tenant_id)
    if row is None:
        session.add(TenantPolicyRow(tenant_id=tenant_id, revision=revision, document=document))
    else:
        if row.revision == revision and not _same_rules(
            tenant_id, revision, row.document, document
        ):
            raise PolicyRevisionTaken(revision)
        row.revision, row.document, row.updated_at = revision, document, datetime.now(UTC)


def _same_rules(
    tenant_id: str, revision: str, stored: dict[str, Any], given: dict[str, Any]
) -> bool:
    """The two documents state the same policy. Compared as policies, not as JSON: a document
    holds its sets (regions, providers, privacy classes) as lists in the order the writing
    process happened to iterate them, which another process (hash seeds differ) or a restart
    does not repeat, so the same policy sent again was a 409 there."""
    if stored == given:
        return True
    try:
        return _policy(tenant_id, revision, stored) == _policy(tenant_id, revision, given)
    except ValidationError:
        return False  # a stored document that no longer reads as a policy is not this one


def _policy(tenant_id: str, revision: str, document: dict[str, Any]) -> TenantPolicy:
    return TenantPolicy.model_validate({**document, "tenantId": tenant_id, "revision": revision})


async def put_weights(session: AsyncSession, tenant_id: str, weights: Weights) -> None:
    """Set the tenant's own weights: every other tenant's routes keep theirs. The platform-wide
    ones (CatalogStateRow.weights) are left as they are, what a tenant that set none routes with."""
    # The version first, as put_policy: it serialises the tenant's concurrent first writes, so
    # the second finds the first's row instead of failing on its primary key.
    await catalog_state.bump(session)
    row = await session.get(TenantRoutingWeightsRow, tenant_id)
    if row is None:
        session.add(TenantRoutingWeightsRow(tenant_id=tenant_id, weights=weights.model_dump()))
    else:
        row.weights, row.updated_at = weights.model_dump(), datetime.now(UTC)
