"""What one API process holds for its lifetime: engine, sessions, token verifier, Temporal."""

from __future__ import annotations

import asyncio
import itertools
import logging
from datetime import timedelta
from functools import partial

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from temporalio.client import Client

from api.client_auth import FailedSignIns
from api.client_states import ClientStates
from api.invoke_runtime import InvokeRuntime
from core.bounded_refresh import BoundedRefresh
from core.security import TokenVerifier
from core.settings import Settings
from core.temporal import connect
from core.temporal_rotation import TlsRotation
from routing.routes import Routes
from routing.snapshots import SnapshotCache, StatsWindow
from store.db import create_engine, session_factory
from store.receipt_statements import ReceiptStatements
from store.usage_gauge import recount_usage_unknown

log = logging.getLogger("model_router.api")


class Runtime:
    def __init__(
        self,
        settings: Settings,
        temporal_client: Client | None = None,
        verifier: TokenVerifier | None = None,
    ) -> None:
        self.settings = settings
        self.engine: AsyncEngine = create_engine(
            settings.database_url,
            pool_size=settings.database_pool_size,
            echo=settings.database_echo,
            statement_timeout=settings.database_statement_timeout_seconds,
        )
        self.sessions: async_sessionmaker[AsyncSession] = session_factory(self.engine)
        # The invoke path's own pool: no pre-ping (a round trip per checkout), a statement on a
        # dropped connection is retried once instead (store.receipt_statements).
        # Twice the pool: at c=16 a pool of 10 (+10 overflow, closed on return) opened a new
        # server connection every 20 calls (an SSL attempt and a backend fork each, bench/);
        # the connections are opened only as the load needs them and then kept.
        self.hot_engine: AsyncEngine = create_engine(
            settings.database_url,
            pool_size=2 * settings.database_pool_size,
            echo=settings.database_echo,
            pre_ping=False,
            statement_timeout=settings.invoke_store_wait_seconds,
        )
        # Its per-call statements (the claim, the finalise, the catalog version when read)
        # straight on asyncpg, off SQLAlchemy's asyncio layer (on PostgreSQL;
        # store/asyncpg_path.py): the other statements stay on hot_engine.
        self.statements = ReceiptStatements(
            self.hot_engine, direct=True, wait=settings.invoke_store_wait_seconds
        )
        # Shared with the limits middleware: a key set fetched here serves its checks too.
        self.verifier = verifier or TokenVerifier(settings)
        # Whether a token minted here still speaks for its client (api/client_states.py), and
        # the addresses whose sign-ins keep failing (api/client_auth.py): this process's own.
        self.client_states = ClientStates(self.sessions)
        self.failed_sign_ins = FailedSignIns()
        # The usage_unknown recount /metrics runs before a scrape, one at a time, waited on a
        # bounded while (core/bounded_refresh.py); ended with the runtime.
        self.usage_recount = BoundedRefresh(
            partial(recount_usage_unknown, self.sessions, settings.reconciler_lookback_hours)
        )
        self.snapshots = SnapshotCache(
            self.sessions,
            self.statements,
            StatsWindow(
                window=timedelta(minutes=settings.routing_stats_window_minutes),
                refresh=settings.routing_stats_refresh_seconds,
            ),
        )
        # Invoke and ResolveRoutePlan route through the one service.
        self.routes = Routes(self.sessions, self.snapshots)
        self.invoke = InvokeRuntime(settings, self.sessions, self.routes, self.statements)
        # Each catalog version compiled here tells this process's breakers what the fleet judged
        # (Degraded, back again): an open breaker it makes stale is forgotten.
        self.snapshots.on_version = self.invoke.activities.breakers.catalog_moved
        # The console overview's figures, this process's (api/console/overview_cache.py).
        # Imported here: the console's pages import this module.
        from api.console.overview_cache import OverviewCache

        self.overview_cache = OverviewCache()
        self._client: Client | None = None
        self._given = temporal_client
        self._lock = asyncio.Lock()
        self._connector: asyncio.Task[None] | None = None
        # A client this process connected itself follows its TLS files as they are rotated; one
        # given to it is its giver's.
        self._rotation = TlsRotation(settings, self._rebind)

    async def startup(self) -> None:
        if await self.temporal() is None:
            # Keep trying in the background: invocations need the in-process workers.
            self._connector = asyncio.create_task(self._connect_until_up())

    async def _connect_until_up(self) -> None:
        for attempt in itertools.count(1):
            if await self.temporal() is not None:
                return
            await asyncio.sleep(min(2.0, 0.2 * attempt))  # a retry interval, not a wait-for

    async def temporal(self) -> Client | None:
        """The Temporal client, connecting on first use so the API starts even when Temporal is
        still coming up (readiness says so until it is reachable)."""
        if self._client is not None:
            return self._client
        async with self._lock:
            if self._client is None:
                try:
                    client = self._given or await connect(self.settings)
                except Exception as exc:  # any connect failure means "not reachable yet"
                    log.warning("temporal not reachable: %s", type(exc).__name__)
                    return None
                self.invoke.start(client)
                self._client = client
                if self._given is None:
                    self._rotation.start()
        return self._client

    def _rebind(self, client: Client) -> None:
        """A client connected with rotated TLS files, for every holder from now on."""
        self._client = client
        self.invoke.rebind(client)

    async def close(self) -> None:
        if self._connector is not None:
            self._connector.cancel()
        await self._rotation.aclose()
        await self.invoke.stop()
        await self.usage_recount.aclose()
        await self.statements.aclose()
        await self.engine.dispose()
        await self.hot_engine.dispose()
