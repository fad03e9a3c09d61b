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
from concurrent.futures import Future
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


async def pinned(url: str, allowed: Sequence[Network], tenant: str | None = None) -> Pinned:
    """The request(s) to make for `url`, or TargetRefused. `tenant`: whose receiver it is, so
    that the names that hang of one tenant hold back none of another's lookups (None: a caller
    naming no tenant; all such share one bound)."""
    target = httpx.URL(url)
    host = target.raw_host.decode("ascii")
    try:
        literal: Address | None = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        literal = None
    addresses = [literal] if literal is not None else await _resolve(target, host, tenant)
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


# A receiver's name is looked up on a thread of its own, within a bound (RESOLVE_SECONDS). On the
# loop's default pool (a few threads on a small machine, which the providers' connections resolve
# on too), a name whose DNS servers never answered held a thread for the resolver's own timeouts
# (10-30 s), and a tenant's admin subscribing a few such names stalled every tenant's new provider
# connections in that process. On a pool of four of our own it was the same within webhooks: one
# tenant's four receivers on names that hang took the four threads, and every other tenant's
# lookup waited out its bound behind them and failed, a delivery failure each, their events held
# and, past webhook_end_after_failing_hours, their healthy subscriptions ended. A thread a lookup
# queues behind nobody's. Past the bound the lookup is a failure to resolve; its thread finishes
# on its own, and what such threads may pile up to is bounded below.
RESOLVE_SECONDS = 5.0
# Lookups past their bound and still running that one tenant may have: at that many, its lookups
# of further names are refused at once, with no thread, until one ends; other tenants' are not
# held. A name that answers does so well within the bound (the resolver's first try waits 5 s,
# glibc's default `timeout:5`, before it asks again), so only names that hang count here: a
# tenant's burst of healthy deliveries, however many its subscriptions, is never refused by it.
TENANT_HUNG_LOOKUPS = 8
# Lookups running at once that one tenant started, hung or not: at that many, its lookups of
# further names are refused at once, with no thread, until one ends; other tenants' are not held.
# Counting hung lookups only (above) left a tenant free for their first 5 s: its admin creating
# subscriptions to unique names that hang (the API takes bursts of 400 requests, each looked up
# before it is refused) started 512 lookups within them, the process's bound below, and every
# tenant's lookups in that process were refused until the resolver gave up on those names
# (10-30 s). At 32 a tenant holds at most a sixteenth of the process's lookups. Its healthy ones
# stay well under it: a subscription's deliveries run one at a time (workflows/
# webhook_delivery.py), a tenant holds at most 20 active subscriptions unless the operator raises
# MODEL_ROUTER_WEBHOOK_MAX_SUBSCRIPTIONS_PER_TENANT, lookups of one host are shared, and a name
# that answers does so in milliseconds: 20 at once at most, and 12 to spare for its admins'
# subscription creations meanwhile. (A cap raised past ~30, on as many distinct hosts, lets a
# burst's lookups past 32 be refused: a failed attempt each, retried.)
TENANT_LOOKUPS = 32
# Lookups running at once in a process, whoever's: past it, every new lookup is refused at once.
# What it bounds is the threads: each blocked holds its stack, 8 MB reserved and some 17 KB
# resident (512 threads waiting, measured on CPython 3.11), 9 MB at the cap. Generous: a
# delivery worker runs at most 100 deliveries at once (worker.WEBHOOK_DELIVERY_SLOTS), and with
# each tenant's lookups held to TENANT_LOOKUPS (its hung ones to TENANT_HUNG_LOOKUPS) it takes
# sixteen tenants at their bound at once (512 / 32), or sixty-four tenants' names hanging past
# their 5 s (512 / 8), to reach it.
PROCESS_LOOKUPS = 512


@dataclass(frozen=True)
class _Lookup:
    """A lookup of one host under way, shared by every caller for that host meanwhile; it counts
    against the tenant whose delivery started it."""

    tenant: str | None
    answer: Future[list[tuple[Any, ...]]]
    deadline: float  # time.monotonic()


# One lookup per host at a time: every delivery to a host resolves it again (DNS rebinding), so a
# host whose DNS hangs, delivered to by many subscriptions or retried every few seconds, took a
# thread per delivery. Callers for a host wait on the lookup under way (whichever tenant started
# it: the name hangs for all alike); once that is past its bound and still running, they are
# refused at once rather than given another thread to hang. The map holds running lookups only:
# the counts above are read from it.
_LOOKUPS: dict[str, _Lookup] = {}
_LOOKUPS_LOCK = threading.Lock()


def _lookup(host: str, port: int, tenant: str | None) -> _Lookup:
    """The lookup of `host` under way, or one started now on a thread of its own; TargetRefused
    when `tenant` holds as many lookups, or hung lookups, as it may, or the process as many
    lookups."""
    with _LOOKUPS_LOCK:
        under_way = _LOOKUPS.get(host)
        if under_way is not None:
            return under_way
        _refuse_past_bounds(host, tenant)
        answer: Future[list[tuple[Any, ...]]] = Future()
        answer.set_running_or_notify_cancel()  # running: nothing may cancel what others wait on
        lookup = _Lookup(tenant, answer, time.monotonic() + RESOLVE_SECONDS)
        # The port only fills in the answers' port fields, which are not read: one lookup serves
        # every port of the host.
        thread = threading.Thread(
            target=_getaddrinfo, args=(answer, host, port), name="webhook-dns", daemon=True
        )
        try:
            thread.start()
        except RuntimeError:  # the system gave no thread: refused like a full bound
            raise TargetRefused(f"{host} was not looked up: no thread to resolve it on") from None
        _LOOKUPS[host] = lookup
    answer.add_done_callback(partial(_forget, host, lookup))
    return lookup


def _refuse_past_bounds(host: str, tenant: str | None) -> None:
    """TargetRefused when a new lookup would pass a bound; called under _LOOKUPS_LOCK. Counted
    afresh each time (the map holds the few lookups running), so nothing has to notice a lookup
    passing its deadline."""
    if len(_LOOKUPS) >= PROCESS_LOOKUPS:
        raise TargetRefused(f"{host} was not looked up: {len(_LOOKUPS)} lookups are under way")
    own = [lookup for lookup in _LOOKUPS.values() if lookup.tenant == tenant]
    now = time.monotonic()
    hung = sum(1 for lookup in own if lookup.deadline <= now)
    if hung >= TENANT_HUNG_LOOKUPS:
        raise TargetRefused(
            f"{host} was not looked up: {hung} of this tenant's receivers' names are still "
            f"resolving past {RESOLVE_SECONDS:g} s"
        )
    if len(own) >= TENANT_LOOKUPS:
        raise TargetRefused(
            f"{host} was not looked up: {len(own)} of this tenant's receivers' names are "
            "being resolved"
        )


def _getaddrinfo(answer: Future[list[tuple[Any, ...]]], host: str, port: int) -> None:
    try:
        answer.set_result(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
    except BaseException as exc:  # handed to the waiters, as an executor would
        answer.set_exception(exc)


async def _answer(lookup: _Lookup, seconds: float) -> list[tuple[Any, ...]]:
    """The lookup's answer within `seconds`, else TimeoutError; the lookup goes on meanwhile.
    Waited on, not shielded: a shield given up on dropped its hold on the lookup's answer, and
    a lookup that failed after its callers had given up logged "Future exception was never
    retrieved", an error line each, about nothing."""
    waiter = asyncio.wrap_future(lookup.answer)
    waiter.add_done_callback(_read)
    # asyncio.wait cancels nothing: a caller that gives up leaves the lookup to the others.
    if not (await asyncio.wait({waiter}, timeout=seconds))[0]:
        raise TimeoutError
    return waiter.result()


def _read(waiter: asyncio.Future[Any]) -> None:
    """Reads the waiter's outcome, so that one nobody awaits any more is not logged as lost."""
    if not waiter.cancelled():
        waiter.exception()


def _forget(host: str, lookup: _Lookup, _: object) -> None:
    with _LOOKUPS_LOCK:
        if _LOOKUPS.get(host) is lookup:
            del _LOOKUPS[host]


async def _resolve(target: httpx.URL, host: str, tenant: str | None) -> list[Address]:
    port = target.port or (443 if target.scheme == "https" else 80)
    lookup = _lookup(host, port, tenant)
    left = lookup.deadline - time.monotonic()
    try:
        if left <= 0:
            raise TimeoutError  # its lookup timed out and still runs: no second thread for it
        infos = await _answer(lookup, left)
    except TimeoutError:
        raise TargetRefused(f"{host} did not resolve within {RESOLVE_SECONDS:g} s") from None
    except (OSError, UnicodeError):  # UnicodeError: a label empty or over 63 characters
        raise TargetRefused(f"{host} does not resolve") from None
    # getaddrinfo may name an address once per protocol: each is kept once, in its order.
    return list(dict.fromkeys(ipaddress.ip_address(info[4][0]) for info in infos))
