"""Writes of the routing settings the planner reads beside the catalog rows: a tenant's policy,
with every revision of it the tenant published, and its scoring weights (read back by
`store/catalog_loader.py`). Each write bumps the catalog version in the same transaction, so
cached snapshots see it at once."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession

from domain.policy import TenantPolicy, baseline_policy
from domain.scoring import Weights
from store import catalog_state
from store.routing_tables import TenantPolicyRevisionRow, TenantPolicyRow, TenantRoutingWeightsRow


class PolicyRevisionTaken(Exception):
    """The revision exists with other rules: a revision names one document, never two."""


async def put_policy(
    session: AsyncSession, tenant_id: str, revision: str, document: dict[str, Any]
) -> None:
    """Publish `document` as the tenant's policy under `revision` and make it the current one.

    A revision names one set of rules for good, current or not: route plans, decision records,
    receipts and events name the policy they were decided under by its revision alone, so one
    published before with other rules raises PolicyRevisionTaken before anything is written
    (the caller's transaction is rolled back). Published before with the same rules, it is the
    current policy again: PUT sets what is in force, and this is how an operator rolls back to
    it; its history row keeps its first publication."""
    # The catalog version's row first: it serialises every writer of routing settings, so a
    # concurrent first write of the tenant's policy, or of the same new revision, waits here
    # and then finds the other's rows. Read first, both inserted and the second's unique
    # violation was a 500. The history's primary key is the last word should a writer ever
    # not come this way: its IntegrityError is the caller's to answer (api/routers/routing.py).
    await catalog_state.bump(session)
    row = await session.get(TenantPolicyRow, tenant_id)
    if row is not None:
        await _keep(session, tenant_id, row.revision, row.document)
    published = await _published(session, tenant_id, revision)
    if published is None:
        session.add(
            TenantPolicyRevisionRow(tenant_id=tenant_id, revision=revision, document=document)
        )
    elif not _same_rules(tenant_id, revision, published, document):
        raise PolicyRevisionTaken(revision)
    if row is None:
        session.add(TenantPolicyRow(tenant_id=tenant_id, revision=revision, document=document))
    else:
        row.revision, row.document, row.updated_at = revision, document, datetime.now(UTC)
    await session.flush()


async def _keep(
    session: AsyncSession, tenant_id: str, revision: str, document: dict[str, Any]
) -> None:
    """The current policy in the history before it is replaced. Migration 0021 put every current
    one there; this keeps one a process older than it wrote since (a rolling upgrade), which
    would otherwise be lost from the history, its revision free for other rules."""
    if await session.get(TenantPolicyRevisionRow, (tenant_id, revision)) is None:
        session.add(
            TenantPolicyRevisionRow(tenant_id=tenant_id, revision=revision, document=document)
        )
        await session.flush()


async def _published(session: AsyncSession, tenant_id: str, revision: str) -> dict[str, Any] | None:
    """The rules `revision` names for the tenant, None while it names none. A tenant that wrote
    no policy routes under the baseline (store/catalog_loader.load_policy), whose revision its
    route plans record: that revision names the baseline's rules before any PUT of it."""
    row = await session.get(TenantPolicyRevisionRow, (tenant_id, revision))
    if row is not None:
        return row.document
    baseline = baseline_policy(tenant_id)
    if revision == baseline.revision:
        return baseline.model_dump(mode="json", by_alias=True, exclude={"tenant_id", "revision"})
    return None


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
