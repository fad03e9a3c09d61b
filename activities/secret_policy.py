"""The Secret Broker's allow-list as configured: which `file:` directories and `env:` variables
an endpointRef may name. One place, used by the registration check (a 422 naming endpointRef)
and by every broker that resolves a deployment's endpointRef (invocations, probes, recovery
trials, evaluations), so an entry written before the allow-list existed is refused too.

Which tenants may name a reference (`secret_ref_tenants`, `tenants/<tenant>/`) can change after
a deployment was registered under it. The registration check alone left tenant B's deployment on
a reference later kept for tenant A probed every two minutes, and called on every invocation,
with A's key: `EndpointBroker` carries the policy, so a broker acting for a known tenant
(`for_tenant`: probes, recovery trials, and the adapter pool when it builds or refreshes a
client) asks again at every resolution, before reading the secret."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

from pydantic import SecretStr
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from core.settings import Settings
from providers.secrets import (
    GATEWAY_ENV_PREFIX,
    Connection,
    SecretBroker,
    SecretPolicy,
    SecretResolutionError,
    default_broker,
    key_in_file,
    secret_digest,
)


def _own_secrets(settings: Settings) -> frozenset[str]:
    """Digests of every secret this process holds: its SecretStr settings, the database URL's
    password, and the usage statements' admin keys (references, read as they are now: an
    organization admin key under /run/secrets or the provider prefix was any operator's to
    register as a deployment's credential)."""
    values = [
        value.get_secret_value()
        for name in type(settings).model_fields
        if isinstance(value := getattr(settings, name), SecretStr)
    ]
    with contextlib.suppress(ArgumentError, ValueError):
        values.append(make_url(settings.database_url).password or "")
    for ref in (settings.statements_openai_admin_ref, settings.statements_anthropic_admin_ref):
        values.append(_read_ref(ref))
    return frozenset(secret_digest(v) for v in values if v.strip())


def _read_ref(ref: str | None) -> str:
    """The value a reference names now, or "" (unset, unreadable: nothing to reserve)."""
    scheme, _, rest = (ref or "").partition(":")
    if scheme == "env":
        return os.environ.get(rest, "")
    if scheme == "file":
        with contextlib.suppress(OSError, UnicodeError):
            return key_in_file(Path(rest).read_text())
    return ""


def secret_policy(settings: Settings) -> SecretPolicy:
    return SecretPolicy(
        reserved_digests=_own_secrets(settings),
        file_dirs=tuple(Path(d).resolve() for d in settings.secret_file_dirs),
        env_names=frozenset(settings.secret_env_names),
        env_prefixes=tuple(settings.secret_env_prefixes),
        reserved_env=frozenset(
            GATEWAY_ENV_PREFIX + name.upper() for name in type(settings).model_fields
        ),
        ref_tenants={ref: frozenset(t) for ref, t in settings.secret_ref_tenants.items()},
    )


class EndpointBroker:
    """The broker for deployments' endpointRefs, with the policy it enforces: `resolve` as
    any broker (the allow-lists, the gateway's own secrets), and `for_tenant` for a caller
    that knows whose deployment it resolves for."""

    def __init__(self, inner: SecretBroker, policy: SecretPolicy) -> None:
        self._inner = inner
        self.policy = policy

    async def resolve(self, endpoint_ref: str) -> Connection:
        return await self._inner.resolve(endpoint_ref)

    def for_tenant(self, tenant_id: str) -> SecretBroker:
        return _TenantBroker(self, tenant_id)


class KeptForOtherTenants(SecretResolutionError):
    """The reference is kept for other tenants now: a refusal, not a secret that failed to
    read. A SecretResolutionError, so every caller classes it as one (`credentials`); told
    apart by the adapter pool, which gives a refresh that cannot read the secret one more TTL
    on the working client but must not keep spending another tenant's key for as long."""


class _TenantBroker:
    """Resolves only the references `tenant_id` may name now. A refusal is a
    SecretResolutionError (KeptForOtherTenants), as a reference that does not resolve: no
    request goes out, and the caller classes it `credentials` (a probe holds the deployment
    rather than degrade it; an invocation fails the attempt and falls over)."""

    def __init__(self, broker: EndpointBroker, tenant_id: str) -> None:
        self._broker = broker
        self._tenant_id = tenant_id

    async def resolve(self, endpoint_ref: str) -> Connection:
        # A `file:` reference's owners are read from the disk (the `tenants/<tenant>/`
        # folders and where they resolve): off the event loop, as the broker reads the file.
        refused = await asyncio.to_thread(
            self._broker.policy.tenant_refusal, endpoint_ref, self._tenant_id
        )
        if refused:
            # Names the reference, as every broker error does; never the tenants it is kept for.
            raise KeptForOtherTenants(f"endpointRef {endpoint_ref!r}: {refused}")
        return await self._broker.resolve(endpoint_ref)


def for_tenant(broker: SecretBroker, tenant_id: str) -> SecretBroker:
    """`broker` resolving for `tenant_id`'s deployment. The gateway's brokers are
    `endpoint_broker`'s; one built by hand without a policy (unit tests' stand-ins) restricts
    nothing, as a SecretPolicy without lists does, and is used as it is."""
    if isinstance(broker, EndpointBroker):
        return broker.for_tenant(tenant_id)
    return broker


def endpoint_broker(settings: Settings) -> EndpointBroker:
    """The broker for deployments' endpointRefs."""
    policy = secret_policy(settings)
    return EndpointBroker(
        default_broker(allow_upstream=settings.allow_upstream_endpoints, policy=policy), policy
    )
