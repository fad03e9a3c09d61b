"""Temporal's client certificate rotated on disk while the gateway runs, as cert-manager renews
one: the API and the worker connect with the new files and use them. Once the frontend takes
only the new certificate and drops every connection (a frontend restart), calls are answered and
lifecycle workflows run on the worker, with no process restarted. A process that kept the files
it read at start presented the old certificate on its reconnect, turned away for good: every
call refused until a restart."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import openai
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client
from temporalio.worker import Worker

from core.settings import Settings
from core.temporal import connect
from core.temporal_rotation import TlsRotation
from providers.upstream import UpstreamServer
from tests.conftest import TokenFactory
from tests.helpers.catalog import approved_profile
from tests.helpers.deadline import eventually
from tests.helpers.stack import serve
from tests.helpers.tls_front import Pki, TlsFront, fingerprint
from worker import build_invocation_worker, build_worker, evaluation_adapters, follow_tls_rotation

MODEL = "tls-rotation-sim"


async def test_a_rotated_client_certificate_is_used_without_a_restart(
    tmp_path: Path,
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    token_for: TokenFactory,
    tenant: str,
    upstream: UpstreamServer,
) -> None:
    pki = Pki(tmp_path)
    old_cert, old_key = pki.issue("model-router")
    cert_file, key_file = tmp_path / "client.pem", tmp_path / "client.key"
    cert_file.write_bytes(old_cert)
    key_file.write_bytes(old_key)
    # The test's own client goes to the dev server directly: only the gateway's go through the
    # mutual-TLS frontend.
    direct = await connect(settings)
    deployment = {"provider": "openai", "endpointRef": upstream.endpoint_ref, "model": MODEL}
    async with TlsFront(pki, tmp_path, settings.temporal_address) as front:
        run = uuid.uuid4().hex[:8]
        own = settings.model_copy(
            update={
                "temporal_address": front.address,
                "temporal_tls_server_ca_cert": pki.ca,
                "temporal_tls_client_cert": cert_file,
                "temporal_tls_client_key": key_file,
                "temporal_tls_server_name": "localhost",
                "temporal_tls_reload_seconds": 0.2,
                "temporal_task_queue": f"tlsrot-{run}",
                "temporal_invocation_task_queue": f"tlsrot-inv-{run}",
            }
        )
        adapters = evaluation_adapters(own)
        polling: list[Worker] = []
        rotation = follow_tls_rotation(own, polling)  # as the worker process makes it
        shared = build_worker(await connect(own), own, sessions, adapters=adapters)
        invocations = build_invocation_worker(await connect(own), own, sessions)
        polling += [shared, invocations]
        rotation.start()
        try:
            async with shared, invocations, serve(own) as api:
                token = await token_for(tenant)
                auth = {"Authorization": f"Bearer {token}"}
                sdk = openai.AsyncOpenAI(base_url=f"{api.url}/v1", api_key=token, max_retries=0)
                async with httpx.AsyncClient(base_url=api.url, timeout=30) as http:
                    await approved_profile(
                        http, auth, direct, tenant, "tls-before", {"tls/a": deployment}
                    )
                    await sdk.chat.completions.create(
                        model="tls-before", messages=[{"role": "user", "content": "a"}]
                    )
                    assert fingerprint(old_cert) in front.accepted

                    runtime = api.app.state.runtime
                    before = (await runtime.temporal(), shared.client, invocations.client)
                    new_cert, new_key = pki.issue("model-router")
                    key_file.write_bytes(new_key)
                    cert_file.write_bytes(new_cert)

                    async def moved() -> bool:  # the API's holders and both workers
                        now = (await runtime.temporal(), shared.client, invocations.client)
                        return all(a is not b for a, b in zip(now, before, strict=True))

                    await eventually(moved, timeout=30)
                    assert fingerprint(new_cert) in front.accepted
                    front.revoke(old_cert)
                    front.drop()

                    async def answered() -> bool:
                        try:
                            await sdk.chat.completions.create(
                                model="tls-before", messages=[{"role": "user", "content": "b"}]
                            )
                        except openai.APIStatusError as exc:
                            assert exc.status_code == 503, exc  # refused while it reconnects
                            return False
                        return True

                    await eventually(answered, timeout=60, interval=0.5)
                    # A lifecycle workflow runs on the worker, reached with the new pair too.
                    await approved_profile(
                        http, auth, direct, tenant, "tls-after", {"tls/b": deployment}
                    )
                    await sdk.chat.completions.create(
                        model="tls-after", messages=[{"role": "user", "content": "c"}]
                    )
                    assert (await http.get("/readyz")).status_code == 200
        finally:
            await rotation.aclose()
            await adapters.aclose()


async def test_files_that_do_not_connect_keep_the_client_in_use(
    tmp_path: Path, settings: Settings
) -> None:
    """A certificate written before its key (or a pair that does not match) fails to connect:
    the working client stays, and the files are tried again at the next look; files that did
    not change are not connected with at all."""
    pki = Pki(tmp_path)
    cert, key = pki.issue("model-router")
    cert_file, key_file = tmp_path / "client.pem", tmp_path / "client.key"
    cert_file.write_bytes(cert)
    key_file.write_bytes(key)
    own = settings.model_copy(
        update={"temporal_tls_client_cert": cert_file, "temporal_tls_client_key": key_file}
    )
    tries: list[bytes] = []
    swapped: list[Client] = []
    new_client = await connect(settings)

    async def connects(given: Settings) -> Client:
        tries.append(given.temporal_tls_client_cert.read_bytes())  # type: ignore[union-attr]
        if len(tries) == 1:
            raise RuntimeError("the key does not match the certificate")
        return new_client

    rotation = TlsRotation(own, swapped.append, connects=connects)
    assert not await rotation.look() and tries == []  # unchanged: nothing tried

    cert_file.write_bytes(pki.issue("model-router")[0])
    assert not await rotation.look() and swapped == []  # refused: the client in use stays
    assert await rotation.look() and swapped == [new_client]  # tried again, and used
    assert len(tries) == 2
    assert not await rotation.look()  # and not again

    key_file.unlink()  # mid-rewrite: a file gone is waited for, not connected without
    assert not await rotation.look() and len(tries) == 2


async def test_a_swap_that_fails_is_tried_again_at_the_next_look(
    tmp_path: Path, settings: Settings
) -> None:
    """A holder refusing the new client (a worker stopping as it is handed over) left the files
    taken as in use, and never tried again: the process kept the old certificate for good."""
    pki = Pki(tmp_path)
    cert_file, key_file = tmp_path / "client.pem", tmp_path / "client.key"
    cert, key = pki.issue("model-router")
    cert_file.write_bytes(cert)
    key_file.write_bytes(key)
    own = settings.model_copy(
        update={"temporal_tls_client_cert": cert_file, "temporal_tls_client_key": key_file}
    )
    new_client = await connect(settings)
    handed: list[Client] = []

    def swap(client: Client) -> None:
        handed.append(client)
        if len(handed) == 1:
            raise RuntimeError("a worker refused the client")

    async def connects(given: Settings) -> Client:
        return new_client

    rotation = TlsRotation(own, swap, connects=connects)
    cert_file.write_bytes(pki.issue("model-router")[0])
    with pytest.raises(RuntimeError):
        await rotation.look()
    assert await rotation.look() and len(handed) == 2  # tried again, and in use
    assert not await rotation.look()
