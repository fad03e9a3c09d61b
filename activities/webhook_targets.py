"""A webhook receiver's address, resolved and checked (domain/webhook_targets.py), and the
request pinned to the address that was checked: the URL names the IP, while the Host header
and the TLS server name keep the host's name (so the certificate is still checked against it).
Checked when a subscription is created and again before every delivery, so a name that later
resolves to a private address (DNS rebinding) is refused, and nothing is resolved again between
the check and the connection."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field

import httpx

from domain.webhook_targets import Address, Network, refusal


class TargetRefused(Exception):
    """The receiver's host may not be delivered to; the message says why."""


@dataclass(frozen=True)
class Pinned:
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    extensions: dict[str, str] = field(default_factory=dict)


async def pinned(url: str, allowed: Sequence[Network]) -> Pinned:
    """The request to make for `url`, or TargetRefused."""
    target = httpx.URL(url)
    host = target.host
    try:
        literal: Address | None = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    addresses = [literal] if literal is not None else await _resolve(target)
    reason = refusal(addresses, allowed)
    if reason is not None:
        raise TargetRefused(reason)
    if literal is not None:
        return Pinned(url=url)
    return Pinned(
        url=str(target.copy_with(host=str(addresses[0]))),
        headers={"Host": target.netloc.decode("ascii")},
        extensions={"sni_hostname": host} if target.scheme == "https" else {},
    )


async def _resolve(target: httpx.URL) -> list[Address]:
    port = target.port or (443 if target.scheme == "https" else 80)
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(
            target.host, port, type=socket.SOCK_STREAM
        )
    except OSError as exc:
        raise TargetRefused(f"{target.host} does not resolve ({exc.strerror or exc})") from None
    # getaddrinfo may name an address once per protocol: each is kept once. IPv4 ones first, so
    # the pinned address is the same on every host whether or not it prefers IPv6.
    found = dict.fromkeys(ipaddress.ip_address(info[4][0]) for info in infos)
    return sorted(found, key=lambda address: address.version)
