"""Route plans: resolved once per (tenant, run, profile), then immutable for the run."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col, select

from domain.events import TOPICS
from domain.route_plan import RoutePlanResult
from store.db import transaction
from store.repositories import OutboxRepository
from store.tables import RoutePlanRow


async def find(
    session: AsyncSession, tenant_id: str, run_id: uuid.UUID, profile_id: str
) -> RoutePlanRow | None:
    stmt = (
        select(RoutePlanRow)
        .where(col(RoutePlanRow.tenant_id) == tenant_id)
        .where(col(RoutePlanRow.run_id) == run_id)
        .where(col(RoutePlanRow.profile_id) == profile_id)
    )
    return (await session.scalars(stmt)).first()


async def get(
    session: AsyncSession, tenant_id: str, route_plan_id: uuid.UUID
) -> RoutePlanRow | None:
    row = await session.get(RoutePlanRow, route_plan_id)
    return row if row is not None and row.tenant_id == tenant_id else None


class NothingToPin(Exception):
    def __init__(self, plan: RoutePlanResult) -> None:
        super().__init__(f"no candidate for profile {plan.profile_id}")
        self.plan = plan


async def resolve_once(
    sessions: async_sessionmaker[AsyncSession],
    tenant_id: str,
    run_id: uuid.UUID,
    profile_id: str,
    decide: Callable[[], Awaitable[RoutePlanResult]],
) -> tuple[RoutePlanRow, bool]:
    """The run's plan for the profile, deciding and persisting it only if there is none yet.
    Concurrent first resolves race on the unique key; the losers read the winner's plan.
    A decision with no candidate is not pinned (NothingToPin): a run that starts while its
    deployments are down, or refused by a policy that is then fixed, would otherwise be stuck
    with an empty route for good; its next call decides again."""
    async with sessions() as session:
        existing = await find(session, tenant_id, run_id, profile_id)
    if existing is not None:
        return existing, False
    plan = await decide()
    if not plan.candidate_ids:
        raise NothingToPin(plan)
    row = RoutePlanRow(
        run_id=run_id,
        tenant_id=tenant_id,
        profile_id=profile_id,
        profile_version=plan.profile_version,
        policy_revision=plan.policy_revision,
        candidates=plan.candidate_ids,
        constraints=plan.constraints.model_dump(mode="json", by_alias=True),
        resolved_at=plan.resolved_at,
        snapshot_version=plan.snapshot_version,
        policy_decision_id=plan.policy_decision_id,
    )
    try:
        async with transaction(sessions) as session:
            session.add(row)
            await session.flush()
            OutboxRepository(session, tenant_id).append(
                event_type="RoutePlanResolved",
                topic=TOPICS["RoutePlanResolved"],
                aggregate_type="RoutePlan",
                aggregate_id=str(row.route_plan_id),
                payload={
                    "routePlanId": str(row.route_plan_id),
                    "runId": str(run_id),
                    "tenantId": tenant_id,
                    "profileId": profile_id,
                    "candidates": list(row.candidates),
                },
            )
    except IntegrityError:
        async with sessions() as session:
            winner = await find(session, tenant_id, run_id, profile_id)
        assert winner is not None
        return winner, False
    return row, True
