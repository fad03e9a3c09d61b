"""Provider adapters kept per deployment, so calls reuse the SDK client and its connections;
credentials are resolved again after a while (`invoke_adapter_ttl_seconds`), so a rotated key
is picked up without restart.

A call leases its adapter for as long as it runs. A refresh gives new calls a new client and
retires the old one, which is closed only when its last lease ends: closing it at once cut every
stream still running through it (issue 19: 14 cut streams, then a breaker opened by those cuts,
every five minutes under load).

A refresh that cannot resolve the credentials (a secret file caught mid-rewrite, a vault not
answering) keeps the working client: it is asked again every `REFRESH_RETRY_SECONDS`, for up to
one more TTL, and only then does the deployment's call fail for its credentials. The refresh
used to fail the call in hand, on a client that worked."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from domain.invocation import Target
from providers.base import ProviderAdapter
from providers.registry import resolve_adapter
from providers.secrets import SecretBroker, SecretResolutionError
from providers.types import ProviderTimeouts

log = logging.getLogger("model_router.adapters")
REFRESH_RETRY_SECONDS = 30.0
_Key = tuple[str, str, str, str, str]  # deployment, provider, model, endpoint, modality


@dataclass(eq=False)
class _Entry:
    adapter: ProviderAdapter
    born: float
    fresh_until: float
    leases: int = 0
    retired: bool = False
    closed: bool = False


class AdapterPool:
    def __init__(
        self,
        broker: SecretBroker,
        timeouts: ProviderTimeouts,
        ttl_seconds: float = 300.0,
        prompt_caching: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clock = clock
        self._prompt_caching = prompt_caching
        self._broker = broker
        self._timeouts = timeouts
        self._ttl = ttl_seconds
        self._current: dict[_Key, _Entry] = {}
        self._retired: set[_Entry] = set()
        self._lock = asyncio.Lock()
        self.refreshes = 0  # clients replaced after their TTL

    @contextlib.asynccontextmanager
    async def lease(self, target: Target) -> AsyncIterator[ProviderAdapter]:
        """The deployment's adapter, kept open until the block ends, refreshed or not."""
        entry = await self._entry(target)
        entry.leases += 1  # no await between finding the entry and leasing it
        try:
            yield entry.adapter
        finally:
            entry.leases -= 1
            if entry.retired and entry.leases == 0:
                await self._close(entry)

    async def ready(self, target: Target) -> None:
        """Resolve the deployment's credentials now (SecretResolutionError if they are
        missing), so a run can refuse early."""
        await self._entry(target)

    @property
    def ttl_seconds(self) -> float:
        return self._ttl

    @property
    def open_clients(self) -> int:
        """Clients not yet closed: current ones and retired ones still serving a call."""
        return sum(1 for e in (*self._current.values(), *self._retired) if not e.closed)

    def _fresh(self, entry: _Entry | None) -> bool:
        return entry is not None and self._clock() < entry.fresh_until

    async def _entry(self, target: Target) -> _Entry:
        modality = target.modality.value if target.modality else ""
        key = (target.deployment_id, target.provider, target.model, target.endpoint_ref, modality)
        found = self._current.get(key)
        if found is not None and self._fresh(found):
            return found
        async with self._lock:
            found = self._current.get(key)
            if found is not None and self._fresh(found):
                return found
            try:
                adapter = await resolve_adapter(
                    self._broker,
                    provider=target.provider,
                    model=target.model,
                    endpoint_ref=target.endpoint_ref,
                    timeouts=self._timeouts,
                    modality=target.modality,
                    prompt_caching=self._prompt_caching,
                )
            except SecretResolutionError:
                now = self._clock()
                if found is None or now - found.born >= 2 * self._ttl:
                    raise
                log.warning(
                    "refreshing %s's client: its credentials did not resolve; the current "
                    "client serves on, asked again in %.0f s",
                    target.deployment_id,
                    REFRESH_RETRY_SECONDS,
                )
                found.fresh_until = now + min(REFRESH_RETRY_SECONDS, self._ttl)
                return found
            now = self._clock()
            entry = _Entry(adapter, now, now + self._ttl)
            self._current[key] = entry
            if found is not None:
                self.refreshes += 1
                found.retired = True
                if found.leases == 0:
                    await self._close(found)
                else:
                    self._retired.add(found)
            return entry

    async def _close(self, entry: _Entry) -> None:
        if entry.closed:
            return
        entry.closed = True
        self._retired.discard(entry)
        try:
            await entry.adapter.aclose()
        except Exception as exc:  # a client that fails to close is gone either way
            log.warning("closing a provider client failed: %s", type(exc).__name__)

    async def aclose(self) -> None:
        for entry in [*self._current.values(), *self._retired]:
            await self._close(entry)
        self._current.clear()
