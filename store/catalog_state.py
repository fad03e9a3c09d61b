"""The catalog version: bumped in the same transaction as every change a routing decision
depends on (deployments, evidence, profiles, prices, tenant policies)."""

from __future__ import annotations

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col, select

from store.tables import CatalogStateRow


async def bump(session: AsyncSession) -> None:
    await session.execute(
        update(CatalogStateRow)
        .where(col(CatalogStateRow.id) == 1)
        .values(version=col(CatalogStateRow.version) + 1)
    )


async def current(session: AsyncSession) -> int:
    stmt = select(CatalogStateRow.version).where(col(CatalogStateRow.id) == 1)
    return int((await session.scalar(stmt)) or 0)
