"""The Secret Broker's allow-list as configured: which `file:` directories and `env:` variables
an endpointRef may name. One place, used by the registration check (a 422 naming endpointRef)
and by every broker that resolves a deployment's endpointRef (invocations, probes, recovery
trials, evaluations), so an entry written before the allow-list existed is refused too."""

from __future__ import annotations

from pathlib import Path

from core.settings import Settings
from providers.secrets import (
    GATEWAY_ENV_PREFIX,
    CompositeSecretBroker,
    SecretPolicy,
    default_broker,
)


def secret_policy(settings: Settings) -> SecretPolicy:
    return SecretPolicy(
        file_dirs=tuple(Path(d).resolve() for d in settings.secret_file_dirs),
        env_names=frozenset(settings.secret_env_names),
        env_prefixes=tuple(settings.secret_env_prefixes),
        reserved_env=frozenset(
            GATEWAY_ENV_PREFIX + name.upper() for name in type(settings).model_fields
        ),
    )


def endpoint_broker(settings: Settings) -> CompositeSecretBroker:
    """The broker for deployments' endpointRefs."""
    return default_broker(
        allow_upstream=settings.allow_upstream_endpoints, policy=secret_policy(settings)
    )
