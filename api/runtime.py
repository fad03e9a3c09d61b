"""What one API process holds for its lifetime: engine, sessions, token verifier, Temporal."""

from __future__ import annotations

import asyncio
import logging

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from temporalio.client import Client

from api.routing import SnapshotCache
from core.security import TokenVerifier
from core.settings import Settings
from core.temporal import connect
from store.db import create_engine, session_factory

log = logging.getLogger("model_router.api")


class Runtime:
    def __init__(self, settings: Settings, temporal_client: Client | None = None) -> None:
        self.settings = settings
        self.engine: AsyncEngine = create_engine(
            settings.database_url,
            pool_size=settings.database_pool_size,
            echo=settings.database_echo,
        )
        self.sessions: async_sessionmaker[AsyncSession] = session_factory(self.engine)
        self.verifier = TokenVerifier(settings)
        self.snapshots = SnapshotCache(self.sessions)
        self._client = temporal_client
        self._lock = asyncio.Lock()

    async def temporal(self) -> Client | None:
        """The Temporal client, connecting on first use so the API starts even when Temporal is
        still coming up (readiness says so until it is reachable)."""
        if self._client is not None:
            return self._client
        async with self._lock:
            if self._client is None:
                try:
                    self._client = await connect(self.settings)
                except Exception as exc:  # any connect failure means "not reachable yet"
                    log.warning("temporal not reachable: %s", type(exc).__name__)
                    return None
        return self._client

    async def close(self) -> None:
        await self.engine.dispose()
