"""A request that finds no pooled database connection free within the pool's timeout (every
one busy: a burst, or statements held up by a slow server) is the store being unavailable to
it, answered as any other outage (503, Retry-After, the store-unavailable problem; the
console's 503 page), not a 500; once a connection is free again the next request is served.

SQLAlchemy raises its own `TimeoutError` for it, neither a DBAPIError nor an OSError, which
store/outage.is_outage and the handlers mapping outages did not know."""

from __future__ import annotations

import uuid

import httpx
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, async_sessionmaker

from core.local_ports import free_port
from core.settings import Settings
from domain.enums import Role, Scope
from domain.failures import STORE_RETRY_AFTER_SECONDS
from store.clients import upsert_client
from tests.helpers.browser import ConsoleSession
from tests.helpers.stack import serve

# The pool's wait for a free connection, shortened for the test: no setting names it (the
# API's pools keep SQLAlchemy's 30 s), so the test sets it on the real pool it serves from.
POOL_TIMEOUT_S = 0.5


async def test_no_free_connection_is_a_503_and_the_next_request_is_served(
    settings: Settings, sessions: async_sessionmaker[AsyncSession], tenant: str
) -> None:
    client_id, secret = f"pool-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    await upsert_client(
        sessions,
        tenant_id=tenant,
        client_id=client_id,
        secret=secret,
        roles=[Role.PLATFORM_ADMIN],
        scopes=list(Scope),
    )
    own = settings.model_copy(
        update={
            # A pool of one, and (store/db.py: overflow = pool size) one more past it.
            "database_pool_size": 1,
            # An API of its own without Temporal: the routes used read the store only.
            "temporal_address": f"127.0.0.1:{free_port()}",
            "temporal_connect_timeout_seconds": 1.0,
        }
    )
    async with serve(own) as api, httpx.AsyncClient(base_url=api.url, timeout=30) as http:
        token = (
            await http.post(
                "/oauth/token", data={"grant_type": "client_credentials"}, auth=(client_id, secret)
            )
        ).json()["access_token"]
        auth = {"Authorization": f"Bearer {token}"}
        console, signed = await ConsoleSession.sign_in(api.url, client_id, secret)
        assert signed.status_code == 303, signed.text
        engine = api.app.state.runtime.engine
        engine.pool._timeout = POOL_TIMEOUT_S
        held: list[AsyncConnection] = []
        try:
            # Every connection the pool may hand out, held as a request in progress holds one.
            for _ in range(engine.pool.size() + engine.pool._max_overflow):
                held.append(await engine.connect())
            refused = await http.get("/factory/model-deployments", headers=auth)
            assert refused.status_code == 503, refused.text
            assert refused.headers["content-type"] == "application/problem+json"
            assert refused.headers["retry-after"] == str(STORE_RETRY_AFTER_SECONDS)
            problem = refused.json()
            assert problem["type"] == "https://model-router.dev/problems/store-unavailable"
            page = await console.get("/console")
            assert page.status_code == 503, page.text[:300]
            assert page.headers["content-type"].startswith("text/html")
            assert "store cannot be reached" in page.text
        finally:
            for conn in held:
                await conn.close()
        served = await http.get("/factory/model-deployments", headers=auth)
        assert served.status_code == 200, served.text
        assert (await console.get("/console")).status_code == 200
        await console.close()
