"""PostgreSQL stopped under load and started again (a server of the test's own, same data and
port): every receipt closes — the ones whose close could not be written are closed by their
workflow once the store answers — and no key reaches the provider twice, retried or not."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import asyncpg
import httpx
import openai
import pytest
from sqlalchemy import func, select
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlmodel import col

from bench.local_postgres import LocalPostgres
from core.security import new_client_secret
from core.settings import Settings
from domain.enums import Role, Scope
from providers.upstream import UpstreamServer
from store.clients import upsert_client
from store.db import create_engine, session_factory
from store.migrate import upgrade
from store.tables import InvocationReceiptRow
from tests.helpers.catalog import approved_profile
from tests.helpers.deadline import eventually
from tests.helpers.receipts import all_closed
from tests.helpers.stack import serve, workers

PROFILE, MODEL = "pg-fault", "pg-fault-sim"
CALLERS = 16
# How long the database stays down: the outage. A fault's length, not a wait-for.
OUTAGE_SECONDS = 5.0


@pytest.fixture
async def own_postgres() -> AsyncIterator[tuple[LocalPostgres, str]]:
    work = Path(tempfile.mkdtemp(prefix="mr-pg-fault."))
    work.chmod(0o755)  # PostgreSQL runs as another user and needs to reach its directory
    pg = LocalPostgres(work)
    server = make_url(pg.start())
    try:
        conn = await asyncpg.connect(host=server.host, port=server.port, user=server.username)
        await conn.execute('CREATE DATABASE "mr"')
        await conn.close()
        url = server.set(database="mr").render_as_string(hide_password=False)
        await asyncio.to_thread(upgrade, url)
        yield pg, url
    finally:
        pg.stop("immediate")
        shutil.rmtree(work, ignore_errors=True)


async def test_postgres_stopped_under_load_closes_every_receipt_without_a_second_call(
    own_postgres: tuple[LocalPostgres, str],
    settings: Settings,
    tenant: str,
    upstream: UpstreamServer,
) -> None:
    pg, url = own_postgres
    run = uuid.uuid4().hex[:8]
    own = settings.model_copy(
        update={
            "database_url": url,
            "temporal_task_queue": f"pgfault-{run}",
            "temporal_invocation_task_queue": f"pgfault-inv-{run}",
        }
    )
    engine = create_engine(url)
    sessions: async_sessionmaker[AsyncSession] = session_factory(engine)
    # Each answer streams for a while, so an outage finds calls on both sides of their claim.
    upstream.state.configure(MODEL, chunk_delay=0.05)
    try:
        async with workers(own, sessions) as client, serve(own, client) as api:
            # A client of its own database, its token minted by its own API: a token is
            # checked against its client's row in the database the API reads
            # (api/client_states.py), and the suite's shared one holds none here.
            client_id, secret = f"pgfault-{run}", new_client_secret()
            await upsert_client(
                sessions,
                tenant_id=tenant,
                client_id=client_id,
                secret=secret,
                roles=[Role.PLATFORM_ADMIN],
                scopes=list(Scope),
            )
            async with httpx.AsyncClient(base_url=api.url, timeout=30) as signing_in:
                minted = await signing_in.post(
                    "/oauth/token",
                    data={"grant_type": "client_credentials"},
                    auth=(client_id, secret),
                )
            minted.raise_for_status()
            token = str(minted.json()["access_token"])
            auth = {"Authorization": f"Bearer {token}"}
            async with httpx.AsyncClient(base_url=api.url, timeout=30) as http:
                await approved_profile(
                    http,
                    auth,
                    client,
                    tenant,
                    PROFILE,
                    {
                        "pg/sim": {
                            "provider": "openai",
                            "model": MODEL,
                            "endpointRef": upstream.endpoint_ref,
                        }
                    },
                )
            before = upstream.requests(MODEL)
            sdk = openai.AsyncOpenAI(
                base_url=f"{api.url}/v1", api_key=token, max_retries=0, timeout=120
            )
            keys: list[str] = []
            stop = asyncio.Event()
            answered = asyncio.Event()

            async def caller() -> None:
                while not stop.is_set():
                    key = f"pg-{uuid.uuid4().hex[:10]}"
                    keys.append(key)
                    try:
                        stream = await sdk.chat.completions.create(
                            model=PROFILE,
                            messages=[{"role": "user", "content": "a longer answer, please"}],
                            stream=True,
                            extra_headers={"Idempotency-Key": key},
                        )
                        async for _ in stream:
                            pass
                        answered.set()
                    except openai.APIStatusError as exc:
                        # A caller told to come back does, after the delay it was given.
                        assert exc.status_code in (429, 503), exc
                        wait = float(exc.response.headers.get("retry-after", "1"))
                        await asyncio.sleep(min(wait, 1.0))
                    except openai.APIConnectionError:
                        pass  # a stream cut while the store went away

            load = [asyncio.create_task(caller()) for _ in range(CALLERS)]
            await asyncio.wait_for(answered.wait(), timeout=60)
            await asyncio.to_thread(pg.stop, "fast")
            await asyncio.sleep(OUTAGE_SECONDS)
            await asyncio.to_thread(pg.restart)
            # Load on the recovered store until calls answer again.
            answered.clear()
            await asyncio.wait_for(answered.wait(), timeout=60)
            stop.set()
            await asyncio.gather(*load)

            # The workflows retry their closes at most 10 s apart.
            await eventually(partial(all_closed, sessions, tenant), timeout=90, interval=0.5)
            async with sessions() as session:
                receipts = (
                    await session.scalars(
                        select(InvocationReceiptRow).where(
                            col(InvocationReceiptRow.tenant_id) == tenant
                        )
                    )
                ).all()
            called = upstream.requests(MODEL) - before
            # One provider call at most per receipt, and a receipt for every call.
            assert 0 < called <= len(receipts) <= len(keys)
            # Retrying every key replays what its receipt says: the provider is not called again.
            slots = asyncio.Semaphore(CALLERS)

            async def retry(key: str) -> None:
                async with slots:
                    with contextlib.suppress(openai.APIStatusError):
                        await sdk.chat.completions.create(
                            model=PROFILE,
                            messages=[{"role": "user", "content": "a longer answer, please"}],
                            extra_headers={"Idempotency-Key": key},
                        )

            await asyncio.gather(*(retry(k) for k in keys))
            async with sessions() as session:
                total = await session.scalar(
                    select(func.count())
                    .select_from(InvocationReceiptRow)
                    .where(col(InvocationReceiptRow.tenant_id) == tenant)
                )
            # Keys refused during the outage (nothing claimed) run now, once each.
            assert upstream.requests(MODEL) - before <= (total or 0) == len(keys)
            await sdk.close()
    finally:
        await engine.dispose()
