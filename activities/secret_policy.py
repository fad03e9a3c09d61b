"""The Secret Broker's allow-list as configured: which `file:` directories and `env:` variables
an endpointRef may name. One place, used by the registration check (a 422 naming endpointRef)
and by every broker that resolves a deployment's endpointRef (invocations, probes, recovery
trials, evaluations), so an entry written before the allow-list existed is refused too."""

from __future__ import annotations

import contextlib
from pathlib import Path

from pydantic import SecretStr
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from core.settings import Settings
from providers.secrets import (
    GATEWAY_ENV_PREFIX,
    CompositeSecretBroker,
    SecretPolicy,
    default_broker,
    secret_digest,
)


def _own_secrets(settings: Settings) -> frozenset[str]:
    """Digests of every secret this process holds: its SecretStr settings and the database
    URL's password."""
    values = [
        value.get_secret_value()
        for name in type(settings).model_fields
        if isinstance(value := getattr(settings, name), SecretStr)
    ]
    with contextlib.suppress(ArgumentError, ValueError):
        values.append(make_url(settings.database_url).password or "")
    return frozenset(secret_digest(v) for v in values if v.strip())


def secret_policy(settings: Settings) -> SecretPolicy:
    return SecretPolicy(
        reserved_digests=_own_secrets(settings),
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
