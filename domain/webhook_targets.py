"""Which addresses a webhook may be delivered to. A subscription's URL is chosen by a tenant's
admin and POSTed to by the worker, from inside the platform's network: pointed at the cloud's
metadata service (169.254.169.254), the Temporal frontend or a database, it would make the
worker a tenant's probe of that network (whether delivery succeeded shows in the cursor). So a
receiver must be on a public address, unless the operator names the private networks where
their receivers live."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def refusal(addresses: Iterable[Address], allowed: Sequence[Network]) -> str | None:
    """Why a host with these addresses may not receive webhooks, or None. Every address must
    pass: a name that resolves to one public and one private address is refused."""
    found = list(addresses)
    if not found:
        return "the host has no address"
    for address in found:
        mapped = getattr(address, "ipv4_mapped", None)
        plain = mapped if mapped is not None else address
        if any(plain in network for network in allowed):
            continue
        if not plain.is_global or plain.is_multicast:
            return (
                f"{address} is not a public address (allow its network with "
                "MODEL_ROUTER_WEBHOOK_ALLOWED_PRIVATE_NETWORKS)"
            )
    return None
