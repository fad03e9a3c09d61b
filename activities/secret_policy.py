"""The Secret Broker's allow-list as configured: which `file:` directories and `env:` variables
an endpointRef may name. One place, used by the registration check (a 422 naming endpointRef)
and by every broker that resolves a deployment's endpointRef (invocations, probes, recovery
trials, evaluations), so an entry written before the allow-list existed is refused too."""

from __future__ import annotations

import contextlib
import os
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


def endpoint_broker(settings: Settings) -> CompositeSecretBroker:
    """The broker for deployments' endpointRefs."""
    return default_broker(
        allow_upstream=settings.allow_upstream_endpoints, policy=secret_policy(settings)
    )
