"""A webhook receiver's addresses, resolved and checked (domain/webhook_targets.py) before each
delivery, and the request made so that what is reached is what was checked.

- Plain HTTP is pinned: the URL names each checked address in turn (the next one if it does not
  answer), the Host header keeps the host's name. A name that resolves to a private address
  later (DNS rebinding) is never connected to by name.
- HTTPS keeps the host's name in the URL, so connections pool per host, proxies and NO_PROXY
  work, and the certificate is checked against that name: a rebound name then fails the TLS
  handshake before any request is sent, since no private service holds a certificate for it.
Resolution uses the host as the URL encodes it (IDNA), not a re-encoding of its Unicode form."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import httpx

from domain.webhook_targets import Address, Network, refusal


class TargetRefused(Exception):
    """The receiver's host may not be delivered to; the message says why."""


@dataclass(frozen=True)
class Pinned:
    """The URLs to try in turn (one, or one per checked address) and the headers they need."""

    urls: list[str]
    headers: dict[str, str] = field(default_factory=dict)


async def pinned(url: str, allowed: Sequence[Network]) -> Pinned:
    """The request(s) to make for `url`, or TargetRefused."""
    target = httpx.URL(url)
    host = target.raw_host.decode("ascii")
    try:
        literal: Address | None = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        literal = None
    addresses = [literal] if literal is not None else await _resolve(target, host)
    reason = refusal(addresses, allowed)
    if reason is not None:
        raise TargetRefused(reason)
    if literal is not None or target.scheme == "https":
        return Pinned(urls=[url])
    return Pinned(
        urls=[str(target.copy_with(host=str(a))) for a in addresses],
        headers={"Host": target.netloc.decode("ascii")},
    )


async def post(
    client: httpx.AsyncClient,
    target: Pinned,
    *,
    content: bytes,
    headers: dict[str, str],
    seconds: float,
) -> int:
    """POST to the first of the target's addresses that answers, within `seconds` in all; the
    status it answered with. Its body is never kept, unpacked or asked for compressed: only the
    status matters, and httpx read a body whole into memory, unpacking gzip as it went. A
    receiver answering every event with 10 MB of gzip (10 GB unpacked) took down the worker
    that delivered it, then the next one Temporal retried on, probes and closes with them.

    httpx's timeout bounds each phase (connect, each read), not the whole: a receiver that
    drips a byte of its answer every few seconds held the POST, and its connection from the
    pool every tenant's deliveries share, for as long as it liked while retries opened more.
    Each phase is bounded by what is left of `seconds`: the client's own default (5 s a phase)
    cut a receiver answering in 6 s under a 10 s setting, every attempt, for good. Each address
    but the last may take only its share of what is left to connect: one that drops packets
    (a dead address listed first) is passed over in time for the next.
    """
    headers = {**headers, **target.headers, "Accept-Encoding": "identity"}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    answer: httpx.Response | None = None
    try:
        async with asyncio.timeout(seconds):
            for index, url in enumerate(target.urls):
                left = max(deadline - loop.time(), 0.001)
                phases = httpx.Timeout(left, connect=left / (len(target.urls) - index))
                request = client.build_request(
                    "POST", url, content=content, headers=headers, timeout=phases
                )
                try:
                    answer = await client.send(request, stream=True)
                    break
                except (httpx.ConnectError, httpx.ConnectTimeout):
                    if index == len(target.urls) - 1:
                        raise
    except TimeoutError:
        if answer is None:
            raise httpx.ReadTimeout(f"the receiver took longer than {seconds:g} s in all") from None
    if answer is None:
        raise AssertionError("a pinned target names at least one address")
    # The status is in: the body is read only so that the connection may serve again, within
    # a second and outside the bound above (which, ending meanwhile, failed a delivery the
    # receiver took). A body that stalls, drips or breaks closes the connection instead.
    try:
        with contextlib.suppress(httpx.HTTPError, TimeoutError):
            async with asyncio.timeout(ANSWER_READ_SECONDS):
                await _drain(answer)
    finally:
        await answer.aclose()
    return answer.status_code


# What of a receiver's answer is read (raw, as sent) so that its connection may serve the next
# delivery; past it the connection is closed instead.
ANSWER_READ_BYTES = 64 * 1024
ANSWER_READ_SECONDS = 1.0


async def _drain(answer: httpx.Response) -> None:
    read = 0
    async for chunk in answer.aiter_raw():
        read += len(chunk)
        if read > ANSWER_READ_BYTES:
            return


# A receiver's name is looked up on threads of its own, within a bound: on the loop's default
# pool (a few threads on a small machine, which the providers' connections resolve on too), a
# name whose DNS servers never answered held a thread for the resolver's own timeouts (10-30 s),
# and a tenant's admin subscribing a few such names stalled every tenant's new provider
# connections in that process. Past the bound the lookup is a failure to resolve; its thread
# finishes on its own.
RESOLVE_SECONDS = 5.0
_RESOLVER = ThreadPoolExecutor(max_workers=4, thread_name_prefix="webhook-dns")


@dataclass(frozen=True)
class _Lookup:
    """A lookup of one host under way, shared by every caller for that host meanwhile."""

    answer: Future[list[tuple[Any, ...]]]
    deadline: float  # time.monotonic()


# One lookup per host at a time: every delivery to a host resolves it again (DNS rebinding), so a
# host whose DNS hangs, delivered to by many subscriptions or retried every few seconds, took a
# thread per delivery, and with four of them every tenant's lookups waited behind that one
# tenant's. Callers for a host wait on the lookup under way; once that is past its bound and
# still running, they are refused at once rather than given another thread to hang.
_LOOKUPS: dict[str, _Lookup] = {}
_LOOKUPS_LOCK = threading.Lock()


def _lookup(host: str, port: int) -> _Lookup:
    with _LOOKUPS_LOCK:
        under_way = _LOOKUPS.get(host)
        if under_way is not None:
            return under_way
        # The port only fills in the answers' port fields, which are not read: one lookup serves
        # every port of the host.
        answer = _RESOLVER.submit(socket.getaddrinfo, host, port, type=socket.SOCK_STREAM)
        lookup = _Lookup(answer, time.monotonic() + RESOLVE_SECONDS)
        _LOOKUPS[host] = lookup
    answer.add_done_callback(partial(_forget, host, lookup))
    return lookup


def _forget(host: str, lookup: _Lookup, _: object) -> None:
    with _LOOKUPS_LOCK:
        if _LOOKUPS.get(host) is lookup:
            del _LOOKUPS[host]


async def _resolve(target: httpx.URL, host: str) -> list[Address]:
    port = target.port or (443 if target.scheme == "https" else 80)
    lookup = _lookup(host, port)
    left = lookup.deadline - time.monotonic()
    try:
        if left <= 0:
            raise TimeoutError  # its lookup timed out and still runs: no second thread for it
        async with asyncio.timeout(left):
            # Shielded: a caller that gives up does not cancel the lookup the others wait on.
            infos = await asyncio.shield(asyncio.wrap_future(lookup.answer))
    except TimeoutError:
        raise TargetRefused(f"{host} did not resolve within {RESOLVE_SECONDS:g} s") from None
    except (OSError, UnicodeError):  # UnicodeError: a label empty or over 63 characters
        raise TargetRefused(f"{host} does not resolve") from None
    # getaddrinfo may name an address once per protocol: each is kept once, in its order.
    return list(dict.fromkeys(ipaddress.ip_address(info[4][0]) for info in infos))
