"""Provider adapters kept per deployment, so calls reuse the SDK client and its connections;
credentials are resolved again after a while, so a rotated key is picked up without restart."""

from __future__ import annotations

import asyncio
import time

from domain.invocation import Target
from providers.base import ProviderAdapter
from providers.registry import resolve_adapter
from providers.secrets import SecretBroker
from providers.types import ProviderTimeouts


class AdapterPool:
    def __init__(
        self,
        broker: SecretBroker,
        timeouts: ProviderTimeouts,
        ttl_seconds: float = 300.0,
        prompt_caching: bool = True,
    ) -> None:
        self._prompt_caching = prompt_caching
        self._broker = broker
        self._timeouts = timeouts
        self._ttl = ttl_seconds
        self._adapters: dict[tuple[str, ...], tuple[float, ProviderAdapter]] = {}
        self._lock = asyncio.Lock()

    async def get(self, target: Target) -> ProviderAdapter:
        modality = target.modality.value if target.modality else ""
        key = (target.deployment_id, target.provider, target.model, target.endpoint_ref, modality)
        found = self._adapters.get(key)
        if found is not None and time.monotonic() - found[0] < self._ttl:
            return found[1]
        async with self._lock:
            found = self._adapters.get(key)
            if found is not None and time.monotonic() - found[0] < self._ttl:
                return found[1]
            adapter = await resolve_adapter(
                self._broker,
                provider=target.provider,
                model=target.model,
                endpoint_ref=target.endpoint_ref,
                timeouts=self._timeouts,
                modality=target.modality,
                prompt_caching=self._prompt_caching,
            )
            if found is not None:
                await found[1].aclose()
            self._adapters[key] = (time.monotonic(), adapter)
            return adapter

    async def aclose(self) -> None:
        for _, adapter in self._adapters.values():
            await adapter.aclose()
        self._adapters.clear()
