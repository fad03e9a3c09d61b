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


NOT_PUBLIC = (
    "the host resolves to an address that is not public (allow its network with "
    "MODEL_ROUTER_WEBHOOK_ALLOWED_PRIVATE_NETWORKS)"
)
# IPv6 prefixes that carry an IPv4 address a packet is delivered to: NAT64's well-known and
# local-use prefixes, whose last 32 bits are the address (RFC 6052, RFC 8215).
_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")


def _reached(address: Address) -> Address:
    """The IPv4 address an IPv6 one stands for (mapped, 6to4, Teredo, NAT64), or itself."""
    if isinstance(address, ipaddress.IPv4Address):
        return address
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if any(address in prefix for prefix in _NAT64):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def refusal(addresses: Iterable[Address], allowed: Sequence[Network]) -> str | None:
    """Why a host with these addresses may not receive webhooks, or None. Every address must
    pass: a name that resolves to one public and one private address is refused. The reason
    names no address: it is shown to the tenant, whom it would tell the internal network's."""
    found = list(addresses)
    if not found:
        return "the host has no address"
    for address in found:
        plain = _reached(address)
        if any(plain in network for network in allowed):
            continue
        if isinstance(plain, ipaddress.IPv6Address) and plain in _IPV4_COMPATIBLE:
            return NOT_PUBLIC  # deprecated IPv4-compatible form (::a.b.c.d)
        if not plain.is_global or plain.is_multicast:
            return NOT_PUBLIC
    return None
