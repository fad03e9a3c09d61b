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
used to fail the call in hand, on a client that worked.

Clients are the tenant's: a client is built, and refreshed, through `for_tenant`, which asks
whether the tenant may still name the reference (`secret_ref_tenants`, `tenants/<tenant>/`).
Built with the plain broker, tenant B's deployment on a reference later kept for tenant A spent
A's key on every call of B's. Asked only when a client is built, never per call: a restriction
takes effect within one TTL. Such a refusal (KeptForOtherTenants) gets no grace: it fails the
call at once and the client is dropped, not kept on for one more TTL."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from activities.secret_policy import KeptForOtherTenants, for_tenant
from domain.invocation import Target
from providers.base import ProviderAdapter
from providers.registry import resolve_adapter
from providers.secrets import SecretBroker, SecretResolutionError
from providers.types import ProviderTimeouts

log = logging.getLogger("model_router.adapters")
REFRESH_RETRY_SECONDS = 30.0
# tenant, deployment, provider, model, endpoint, modality: deployment ids are the tenant's own,
# and whether a reference resolves depends on whose deployment it is.
_Key = tuple[str, str, str, str, str, str]


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
        # Keys refused as kept for other tenants, until when, and the refusal: one entry per
        # (tenant, deployment) refused, dropped once a client is built for it again.
        self._refused: dict[_Key, tuple[float, KeptForOtherTenants]] = {}

    @contextlib.asynccontextmanager
    async def lease(self, target: Target, tenant_id: str) -> AsyncIterator[ProviderAdapter]:
        """`tenant_id`'s deployment's adapter, kept open until the block ends, refreshed or
        not."""
        entry = await self._entry(target, tenant_id)
        entry.leases += 1  # no await between finding the entry and leasing it
        try:
            yield entry.adapter
        finally:
            entry.leases -= 1
            if entry.retired and entry.leases == 0:
                await self._close(entry)

    async def ready(self, target: Target, tenant_id: str) -> None:
        """Resolve `tenant_id`'s deployment's credentials now (SecretResolutionError if they
        are missing or kept for other tenants), so a run can refuse early."""
        await self._entry(target, tenant_id)

    @property
    def ttl_seconds(self) -> float:
        return self._ttl

    @property
    def open_clients(self) -> int:
        """Clients not yet closed: current ones and retired ones still serving a call."""
        return sum(1 for e in (*self._current.values(), *self._retired) if not e.closed)

    def _fresh(self, entry: _Entry | None) -> bool:
        return entry is not None and self._clock() < entry.fresh_until

    async def _entry(self, target: Target, tenant_id: str) -> _Entry:
        modality = target.modality.value if target.modality else ""
        key = (
            tenant_id,
            target.deployment_id,
            target.provider,
            target.model,
            target.endpoint_ref,
            modality,
        )
        found = self._current.get(key)
        if found is not None and self._fresh(found):
            return found
        refused = self._refused.get(key)
        if refused is not None and self._clock() < refused[0]:
            # Refused moments ago: asked again only every REFRESH_RETRY_SECONDS. Asked at every
            # call, each took the pool's lock and (for a `file:`) listed the tenants' folders,
            # for as long as the deployment stays routable: a refusal strikes no breaker.
            raise refused[1]
        async with self._lock:
            found = self._current.get(key)
            if found is not None and self._fresh(found):
                return found
            try:
                adapter = await resolve_adapter(
                    # Only here, as a client is built: the tenant check reads the allow-list
                    # (and, for a `file:`, the disk), which a call must not pay for.
                    for_tenant(self._broker, tenant_id),
                    provider=target.provider,
                    model=target.model,
                    endpoint_ref=target.endpoint_ref,
                    timeouts=self._timeouts,
                    modality=target.modality,
                    prompt_caching=self._prompt_caching,
                )
            except KeptForOtherTenants as exc:
                # Not a secret caught mid-rewrite: the tenant may no longer name the reference.
                # Kept on, the working client would spend the other tenants' key for one more
                # TTL; dropped, a call after REFRESH_RETRY_SECONDS asks again.
                self._refused[key] = (self._clock() + REFRESH_RETRY_SECONDS, exc)
                if found is not None:
                    del self._current[key]
                    await self._retire(found)
                raise
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
            self._refused.pop(key, None)
            if found is not None:
                self.refreshes += 1
                await self._retire(found)
            return entry

    async def _retire(self, entry: _Entry) -> None:
        """No new call gets `entry`; it is closed when the calls it carries end."""
        entry.retired = True
        if entry.leases == 0:
            await self._close(entry)
        else:
            self._retired.add(entry)

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
