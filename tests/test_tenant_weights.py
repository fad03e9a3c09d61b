"""The weights a tenant routes with: its own, else the platform-wide ones an installation set
before weights were a tenant's (migration 0016 keeps them), else the defaults. On a database
of its own per engine: the platform-wide row is every tenant's, and setting it on the shared
test database would move the routes of the tests running beside this one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from domain.scoring import DEFAULT_WEIGHTS, Weights
from store import routing_settings
from store.catalog_loader import load_weights
from store.db import create_engine, session_factory, transaction
from store.migrate import upgrade
from store.routing_tables import CatalogStateRow
from tests.conftest import create_database, drop_database

PLATFORM = Weights(capability=0.7, cost=0.1, latency=0.1, history=0.1)
OWN = Weights(capability=1.0, cost=0.0, latency=0.0, history=0.0)


@pytest.fixture(params=["postgresql", "sqlite"])
async def database(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path}/weights.db"
        return
    url = await create_database("mr_weights")
    try:
        yield url
    finally:
        await drop_database(url)


async def test_a_tenant_routes_with_its_own_weights_else_the_platforms(database: str) -> None:
    # Weights set platform-wide before the upgrade that made them a tenant's.
    await asyncio.to_thread(upgrade, database, "0015")
    engine = create_engine(database)
    sessions = session_factory(engine)
    try:
        await _set_platform(sessions, PLATFORM)
        await asyncio.to_thread(upgrade, database)
        async with sessions() as session:
            assert await load_weights(session, "a") == (1, PLATFORM)  # kept

        await _put(sessions, "a", DEFAULT_WEIGHTS)
        async with sessions() as session:
            # Its own, even the defaults; and the version moved, so every cached snapshot is
            # compiled again.
            assert await load_weights(session, "a") == (2, DEFAULT_WEIGHTS)
            assert await load_weights(session, "b") == (2, PLATFORM)
        await _put(sessions, "a", OWN)
        async with sessions() as session:
            assert await load_weights(session, "a") == (3, OWN)
            assert await load_weights(session, "b") == (3, PLATFORM)

        await _set_platform(sessions, None)  # as a database migrated from 0002 has it
        async with sessions() as session:
            assert await load_weights(session, "a") == (3, OWN)
            assert await load_weights(session, "b") == (3, DEFAULT_WEIGHTS)
    finally:
        await engine.dispose()


async def _set_platform(
    sessions: async_sessionmaker[AsyncSession], weights: Weights | None
) -> None:
    """What PUT /factory/routing/weights wrote before the weights were a tenant's."""
    value = weights.model_dump() if weights is not None else None
    async with transaction(sessions) as session:
        await session.execute(update(CatalogStateRow).values(weights=value))


async def _put(sessions: async_sessionmaker[AsyncSession], tenant: str, weights: Weights) -> None:
    async with transaction(sessions) as session:
        await routing_settings.put_weights(session, tenant, weights)
