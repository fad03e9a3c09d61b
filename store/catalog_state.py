"""The catalog version: bumped in the same transaction as every change a routing decision
depends on (deployments, evidence, profiles, prices, tenant policies)."""

from __future__ import annotations

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col, select

from store.routing_tables import CatalogStateRow


async def bump(session: AsyncSession) -> None:
    await session.execute(
        update(CatalogStateRow)
        .where(col(CatalogStateRow.id) == 1)
        .values(version=col(CatalogStateRow.version) + 1)
    )


async def lock(session: AsyncSession) -> None:
    """Lock the version row until the transaction ends, so that a check and the change it
    decides are one step among writers that lock it first (store/pricebook.publish). An UPDATE
    that changes nothing: the version, and so every process's catalog snapshot, stays as it
    was. The row lock is PostgreSQL's; on SQLite the UPDATE takes the database's write lock."""
    await session.execute(
        update(CatalogStateRow)
        .where(col(CatalogStateRow.id) == 1)
        .values(version=col(CatalogStateRow.version))
    )


async def current(session: AsyncSession) -> int:
    stmt = select(CatalogStateRow.version).where(col(CatalogStateRow.id) == 1)
    return int((await session.scalar(stmt)) or 0)
