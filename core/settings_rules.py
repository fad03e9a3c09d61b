"""What a process refuses to start with (or warns of) outside development and test (the
environment is production unless said otherwise).

Settings that are unsafe wherever they are read are refused by `Settings` itself
(`unsafe_settings`, its validator): the debugging switches, and an HS256 signing key shorter
than 32 bytes. Open metrics on the API's port are warned of as its app is built
(`open_metrics`): the unsafe part is the port, not the settings, and the documented
deployments scrape it without a token."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from core.settings import Settings

SAFE_ENVIRONMENTS = frozenset({"development", "test"})
# RFC 7518 §3.2: an HS256 key of at least the hash's size, 256 bits. A shorter secret can be
# searched for offline from any one token it signed, and whoever finds it mints tokens for
# every tenant and role.
MIN_SIGNING_KEY_BYTES = 32


def unsafe_settings(settings: Settings) -> str | None:
    """Why these settings may not be used, or None. Everything passes in development/test."""
    if settings.environment in SAFE_ENVIRONMENTS:
        return None
    # log_content would write prompts and outputs to the logs. allow_upstream_endpoints lets an
    # operator point a deployment at any host and port and read its reply as model output: a
    # server-side request to the internal network.
    for name in ("log_content", "allow_upstream_endpoints"):
        if getattr(settings, name):
            return f"{name} may only be turned on when environment is development or test"
    key = settings.auth_jwt_secret
    if (
        settings.auth_algorithm == "HS256"
        and key is not None
        and len(key.get_secret_value().encode()) < MIN_SIGNING_KEY_BYTES
    ):
        return (
            f"auth_jwt_secret must be at least {MIN_SIGNING_KEY_BYTES} bytes outside development "
            "and test (e.g. `openssl rand -base64 48`)"
        )
    return None


def open_metrics(settings: Settings, *, served: bool) -> str | None:
    """A warning when the API serves GET /metrics (`served`) without a token outside
    development/test: its series name every tenant and its traffic, on the port callers
    reach. A warning, not a refusal: the compose stack and the k8s manifests scrape without
    one (prometheus.io annotations carry no credentials) and keep /metrics off the Ingress,
    and refused, every such installation stopped starting at its next upgrade."""
    if not served or settings.metrics_token is not None:
        return None
    if settings.environment in SAFE_ENVIRONMENTS:
        return None
    return (
        "GET /metrics is open to every caller of the API's port: set MODEL_ROUTER_METRICS_TOKEN "
        "(and scrape with it as a bearer token), keep /metrics off the route callers reach, or "
        "set MODEL_ROUTER_METRICS_ENABLED=false (OTLP export still works)"
    )
