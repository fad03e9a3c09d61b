"""Who may read `GET /metrics` (the API's and the worker's). The series carry tenant ids and
call volumes by tenant, never content; on a port callers reach, any caller could read every
tenant's traffic. With `MODEL_ROUTER_METRICS_TOKEN` set, a scrape must present it as a bearer
token (Prometheus: `authorization: {credentials: …}`); unset, the endpoint is open like the
health probes, for a port only the cluster's scraper reaches; the API warns of that at start
outside development and test (core/settings_rules.open_metrics)."""

from __future__ import annotations

import hmac

from pydantic import SecretStr


def scrape_allowed(authorization: str | None, token: SecretStr | None) -> bool:
    if token is None:
        return True
    scheme, _, given = (authorization or "").partition(" ")
    # Compared in constant time: the token is a shared secret.
    return scheme.lower() == "bearer" and hmac.compare_digest(
        given.strip().encode(), token.get_secret_value().encode()
    )
