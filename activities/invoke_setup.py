"""Building the invocation activities from settings (shared by API processes and workers)."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from activities.adapter_pool import AdapterPool
from activities.invoke import InvokeActivities
from activities.invoke_hub import InvocationHub
from activities.resilience import Resilience
from core.settings import Settings
from providers.secrets import default_broker
from providers.types import ProviderTimeouts
from store.artifacts import ArtifactStore


def provider_timeouts(settings: Settings) -> ProviderTimeouts:
    return ProviderTimeouts(
        connect=settings.provider_connect_timeout_seconds,
        read=settings.provider_read_timeout_seconds,
    )


def invoke_activities(
    settings: Settings, sessions: async_sessionmaker[AsyncSession], hub: InvocationHub
) -> tuple[InvokeActivities, AdapterPool]:
    adapters = AdapterPool(
        default_broker(allow_upstream=settings.allow_upstream_endpoints),
        provider_timeouts(settings),
        prompt_caching=settings.prompt_caching,
    )
    return InvokeActivities(
        sessions,
        hub,
        adapters,
        ArtifactStore(settings.artifact_root),
        Resilience.from_settings(settings),
    ), adapters
