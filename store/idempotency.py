"""Stored answers of keyed writes, one per (tenant, operation, key): the API's
`api/idempotency.py` replays them (or refuses another body under the same key)."""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col, delete, select, update

from store.tables import IdempotencyRecordRow


async def find(
    session: AsyncSession, tenant_id: str, operation: str, key: str
) -> IdempotencyRecordRow | None:
    stmt = (
        select(IdempotencyRecordRow)
        .where(col(IdempotencyRecordRow.tenant_id) == tenant_id)
        .where(col(IdempotencyRecordRow.operation) == operation)
        .where(col(IdempotencyRecordRow.key) == key)
    )
    return (await session.scalars(stmt)).first()


def add(
    session: AsyncSession,
    tenant_id: str,
    operation: str,
    key: str,
    request_hash: str,
    status_code: int,
    response: dict[str, Any],
) -> None:
    """Stage the answer; the unique key makes a concurrent second answer fail at commit."""
    session.add(
        IdempotencyRecordRow(
            tenant_id=tenant_id,
            operation=operation,
            key=key,
            request_hash=request_hash,
            status_code=status_code,
            response=response,
        )
    )


# The status of a key reserved by a request still under way (its answer not stored yet).
RESERVED = 0


async def answer(
    session: AsyncSession,
    tenant_id: str,
    operation: str,
    key: str,
    status_code: int,
    response: dict[str, Any],
) -> None:
    """Store the answer of a key its request reserved."""
    await session.execute(
        update(IdempotencyRecordRow)
        .where(col(IdempotencyRecordRow.tenant_id) == tenant_id)
        .where(col(IdempotencyRecordRow.operation) == operation)
        .where(col(IdempotencyRecordRow.key) == key)
        .values(status_code=status_code, response=response)
    )


async def release(
    session: AsyncSession, tenant_id: str, operation: str, key: str, request_hash: str
) -> None:
    """Give up the key this body reserved, its request having failed with nothing to replay."""
    await session.execute(
        delete(IdempotencyRecordRow)
        .where(col(IdempotencyRecordRow.tenant_id) == tenant_id)
        .where(col(IdempotencyRecordRow.operation) == operation)
        .where(col(IdempotencyRecordRow.key) == key)
        .where(col(IdempotencyRecordRow.request_hash) == request_hash)
        .where(col(IdempotencyRecordRow.status_code) == RESERVED)
    )
