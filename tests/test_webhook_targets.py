"""Webhook receivers: which addresses may receive (domain/webhook_targets.py), and a receiver
named by host resolved, checked and reached at the address checked, with its own Host header
(activities/webhook_targets.py)."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import threading
import uuid
import zlib
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.exceptions import ApplicationError

from activities import webhook_targets
from activities.webhook_targets import Pinned, TargetRefused, pinned, post
from activities.webhook_types import DeliverInput, DeliverySettings
from activities.webhooks import WebhookActivities
from domain.cloudevents import OutboxEvent
from domain.webhook_targets import refusal
from store.db import transaction
from store.repositories import WebhookSubscriptionRepository
from tests.conftest import free_port
from tests.helpers.deadline import UNBOUNDED, eventually

LOOPBACK = [ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128")]


def _ips(*values: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    return [ipaddress.ip_address(v) for v in values]


def test_only_public_addresses_receive_unless_their_network_is_allowed() -> None:
    assert refusal(_ips("93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"), []) is None
    for private in ("169.254.169.254", "10.0.0.1", "100.64.0.1", "127.0.0.1", "::1", "fd00::1",
                    "0.0.0.0", "224.0.0.1", "::ffff:10.0.0.1",
                    # IPv6 forms that deliver to a private IPv4 address: NAT64, 6to4, Teredo,
                    # the old IPv4-compatible form.
                    "64:ff9b::a9fe:a9fe", "64:ff9b:1::a00:5", "2002:a9fe:a9fe::1",
                    "2001:0:4136:e378:8000:63bf:f5ff:fffe", "::a9fe:a9fe"):  # fmt: skip
        assert refusal(_ips(private), []), private
    assert refusal(_ips("64:ff9b::5db8:d70e"), []) is None  # NAT64 to a public address
    # Every address must pass: one public and one private is refused.
    assert refusal(_ips("93.184.215.14", "10.0.0.1"), [])
    assert refusal(_ips("10.0.0.1"), [ipaddress.ip_network("10.0.0.0/8")]) is None
    assert refusal(_ips("::ffff:10.0.0.1"), [ipaddress.ip_network("10.0.0.0/8")]) is None
    assert refusal([], []) == "the host has no address"


async def test_a_named_receiver_is_reached_at_an_address_checked_with_its_host_header() -> None:
    port = free_port()
    target = await pinned(f"http://localhost:{port}/hook", LOOPBACK)
    # Plain HTTP names the checked addresses themselves, in the resolver's order.
    assert f"http://127.0.0.1:{port}/hook" in target.urls
    assert target.headers == {"Host": f"localhost:{port}"}
    seen: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    # Listening on IPv4 only: an address before it that does not answer (::1) is passed over.
    server = await asyncio.start_server(serve, "127.0.0.1", port)
    try:
        async with httpx.AsyncClient() as client:
            status = await post(client, target, content=b"{}", headers={}, seconds=5)
    finally:
        server.close()
        await server.wait_closed()
    assert status == 204
    assert f"host: localhost:{port}".encode() in seen[0].lower()

    with pytest.raises(TargetRefused, match="not public"):
        await pinned(f"http://localhost:{port}/hook", [])
    literal = await pinned("http://127.0.0.1:8443/x", LOOPBACK)
    assert (literal.urls, literal.headers) == (["http://127.0.0.1:8443/x"], {})
    # HTTPS keeps the name: the certificate is checked against it, connections pool per host.
    named_tls = await pinned(f"https://localhost:{port}/x", LOOPBACK)
    assert (named_tls.urls, named_tls.headers) == ([f"https://localhost:{port}/x"], {})


@pytest.mark.parametrize(
    ("head", "delivered"),
    [
        # Its headers never end: no status, the timeout in all.
        (b"HTTP/1.1 200 OK\r\nX-Slow: ", False),
        # Its status in, its body drips: the receiver took the event, and the connection is
        # let go of within a second instead of read to the end.
        (b"HTTP/1.1 200 OK\r\nContent-Length: 60\r\n\r\n", True),
    ],
    ids=["headers", "body"],
)
async def test_a_receiver_that_drips_its_answer_is_given_the_timeout_in_all(
    head: bytes, delivered: bool
) -> None:
    """httpx's timeout is per read: a byte every half second kept the POST (and its pooled
    connection) for the whole drip, here 30 s, and it came back a 200."""
    port = free_port()
    dripping = asyncio.Event()
    writers: list[asyncio.StreamWriter] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        await reader.readuntil(b"\r\n\r\n")
        writer.write(head)
        dripping.set()
        with contextlib.suppress(ConnectionError):
            for _ in range(60):
                if writer.is_closing():
                    break
                writer.write(b".")
                await writer.drain()
                await asyncio.sleep(0.5)  # the receiver's pace, not a wait for the test
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", port)
    target = await pinned(f"http://127.0.0.1:{port}/hook", LOOPBACK)
    try:
        async with httpx.AsyncClient() as client:
            if delivered:
                assert await post(client, target, content=b"{}", headers={}, seconds=1.5) == 200
            else:
                with pytest.raises(httpx.TimeoutException, match="in all"):
                    await post(client, target, content=b"{}", headers={}, seconds=1.5)
    finally:
        server.close()
        for writer in writers:  # the drip ends with the connection
            writer.close()
        await server.wait_closed()
    assert dripping.is_set()


async def test_a_receivers_answer_is_neither_unpacked_nor_read_past_a_bound() -> None:
    """Only the status matters. httpx read the answer whole, unpacking gzip as it went: an
    answer of endless gzip held the delivery to its timeout (then failed it), and a 10 MB one
    (10 GB unpacked) took the worker down. Asked uncompressed, read raw up to a bound."""
    port = free_port()
    asked: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        asked.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        packer = zlib.compressobj(wbits=31)  # gzip
        zeros = b"\0" * (1 << 20)
        with contextlib.suppress(ConnectionError):
            while not writer.is_closing():  # endless, until the client hangs up
                packed = packer.compress(zeros) + packer.flush(zlib.Z_SYNC_FLUSH)
                writer.write(b"%x\r\n%s\r\n" % (len(packed), packed))
                await writer.drain()
                # drain() yields only once the socket's buffer is full: the client shares
                # this event loop.
                await asyncio.sleep(0)
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", port)
    target = await pinned(f"http://127.0.0.1:{port}/hook", LOOPBACK)
    try:
        async with httpx.AsyncClient() as client:
            status = await post(client, target, content=b"{}", headers={}, seconds=5)
    finally:
        server.close()
        await server.wait_closed()
    assert status == 200
    assert b"accept-encoding: identity" in asked[0].lower()


async def test_a_receiver_answering_past_the_clients_own_5_s_is_given_the_setting() -> None:
    """The delivery client's default bounds each phase at 5 s: a receiver answering in 6 s
    under a 10 s setting timed out every attempt, and got the event again each minute."""
    port = free_port()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        await asyncio.sleep(5.5)  # the receiver's pace, not a wait for the test
        writer.write(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", port)
    target = await pinned(f"http://127.0.0.1:{port}/hook", LOOPBACK)
    try:
        async with httpx.AsyncClient() as client:  # the worker's: httpx's own defaults
            status = await post(client, target, content=b"{}", headers={}, seconds=10)
    finally:
        server.close()
        await server.wait_closed()
    assert status == 204


async def test_an_address_that_drops_connections_is_passed_over_in_time_for_the_next() -> None:
    """A receiver's name whose first address drops packets (its connect never answered: here a
    listener whose one-place queue is full) fails over to the next within the timeout."""
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    dead.listen(0)
    filler = socket.create_connection(dead.getsockname())  # the queue's one place taken
    port = free_port()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", port)
    target = Pinned(
        urls=[f"http://127.0.0.1:{dead.getsockname()[1]}/hook", f"http://127.0.0.1:{port}/hook"],
        headers={"Host": "receiver.example"},
    )
    try:
        async with httpx.AsyncClient() as client:
            status = await post(client, target, content=b"{}", headers={}, seconds=4)
    finally:
        server.close()
        await server.wait_closed()
        filler.close()
        dead.close()
    assert status == 204


async def test_delivery_checks_the_receiver_again_and_refuses_a_private_one(
    sessions: async_sessionmaker[AsyncSession], tenant: str
) -> None:
    # A subscription whose name later resolves to a private address (DNS rebinding) is what
    # this stands for: the row holds one the API would have refused.
    async with transaction(sessions) as session:
        row = WebhookSubscriptionRepository(session, tenant).add(
            url="http://10.9.9.9:9/hook",
            signing_secret="whsec_" + "A" * 32,
            event_types=[],
            delivered_position=0,
        )
    event = OutboxEvent(
        position=1,
        event_id=str(uuid.uuid4()),
        tenant_id=tenant,
        event_type="DeploymentStateChanged",
        topic="model-access.deployments.v1.deployment-state-changed",
        aggregate_type="ModelDeployment",
        aggregate_id="a/b",
        payload={},
        occurred_at=datetime.now(UTC),
    )
    async with httpx.AsyncClient() as client:
        activities = WebhookActivities(
            sessions,
            client,
            DeliverySettings(
                poll_interval_seconds=1, retry_max_interval_seconds=1, timeout_seconds=30
            ),
            LOOPBACK,
        )
        # Refused before any connection: unchecked, the POST would wait out its 30 s timeout
        # on an address that does not answer.
        with pytest.raises(ApplicationError, match="receiver refused: the host resolves to an"):
            await asyncio.wait_for(
                activities.deliver(
                    DeliverInput(
                        tenant_id=tenant,
                        subscription_id=str(row.subscription_id),
                        event=event,
                        timeout_seconds=30,
                    )
                ),
                timeout=10,
            )


async def test_a_host_whose_dns_hangs_holds_one_lookup_not_every_tenants(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Four deliveries to a name whose DNS never answers took the four lookup threads every
    tenant shares, and every other name waited behind them to its bound. Now one lookup a host:
    the others wait on it, and once past its bound, while it still runs, are refused at once
    without another thread."""
    release = threading.Event()
    looked_up: list[str] = []
    real = socket.getaddrinfo

    def getaddrinfo(host: str, port: Any, *args: Any, **kwargs: Any) -> Any:
        looked_up.append(host)
        if host == "slow.test":
            release.wait(UNBOUNDED)  # a resolver that never answers
            raise socket.gaierror(socket.EAI_AGAIN, "no answer")
        return real("127.0.0.1", port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(webhook_targets, "RESOLVE_SECONDS", 1.0)
    try:
        slow = [asyncio.ensure_future(pinned("http://slow.test/hook", LOOPBACK)) for _ in range(6)]
        await eventually(lambda: "slow.test" in looked_up)  # all six are under way
        # Another tenant's name resolves meanwhile, well within its bound.
        other = await pinned("http://fast.test:8080/hook", LOOPBACK)
        assert other.urls == ["http://127.0.0.1:8080/hook"]
        for refused in await asyncio.gather(*slow, return_exceptions=True):
            assert isinstance(refused, TargetRefused), refused
        # Its lookup past its bound and still running: refused at once, no second thread.
        with pytest.raises(TargetRefused, match="did not resolve"):
            await asyncio.wait_for(pinned("http://slow.test/other", LOOPBACK), 0.5)
        assert looked_up.count("slow.test") == 1, looked_up
    finally:
        release.set()
    # Once that lookup has ended, the host is looked up afresh (and still refused here).
    await eventually(lambda: "slow.test" not in webhook_targets._LOOKUPS)
    with pytest.raises(TargetRefused, match="does not resolve"):
        await pinned("http://slow.test/hook", LOOPBACK)
    assert looked_up.count("slow.test") == 2
