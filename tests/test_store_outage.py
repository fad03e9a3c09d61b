"""Which database errors are the store being away (the API's 503 with Retry-After) and which
are our statement or its data at fault (a 500): each raised for real by PostgreSQL through the
same engine and driver as the API's."""

from __future__ import annotations

from decimal import Decimal

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from core.settings import Settings
from store.db import create_engine
from store.outage import is_outage
from tests.conftest import free_port


async def _raised(
    sessions: async_sessionmaker[AsyncSession], sql: str, **params: object
) -> Exception:
    async with sessions() as session:
        with pytest.raises(Exception) as caught:
            await session.execute(text(sql), params)
    assert isinstance(caught.value, Exception)
    return caught.value


async def test_a_value_beyond_its_column_is_our_fault_not_an_outage(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    # SQLSTATE 22003, raised by the asyncpg dialect as a plain DBAPIError, as a lost connection
    # is: before the SQLSTATE decided, the API answered it with 503 "store unavailable".
    exc = await _raised(sessions, "SELECT CAST(:v AS NUMERIC(18, 8))", v=Decimal("1e10"))
    assert not is_outage(exc), repr(exc)


async def test_a_missing_column_and_a_malformed_value_are_our_fault(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    assert not is_outage(await _raised(sessions, "SELECT no_such_column FROM tenants"))
    assert not is_outage(
        await _raised(sessions, "SELECT * FROM (VALUES (1)) AS t(a) WHERE a = CAST('x' AS INT)")
    )


async def test_a_connection_ended_by_the_server_is_an_outage(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    # SQLSTATE 57P01 (admin shutdown): what a database restart does to an open connection.
    exc = await _raised(sessions, "SELECT pg_terminate_backend(pg_backend_pid())")
    assert is_outage(exc), repr(exc)


async def test_a_refused_connection_is_an_outage(settings: Settings) -> None:
    url = make_url(settings.database_url).set(host="127.0.0.1", port=free_port())
    engine = create_engine(url.render_as_string(hide_password=False))
    try:
        with pytest.raises(Exception) as caught:
            async with engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
        assert is_outage(caught.value), repr(caught.value)
    finally:
        await engine.dispose()
