"""The worker process registers the workflows and activities and drains on SIGTERM; it exits
non-zero when one of its workers stops on its own; its /metrics answers while the store hangs."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import uuid
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.pool import Pool, QueuePool
from temporalio.client import Client

from activities.lifecycle_types import LifecycleInput, RegisterRequest
from core import metrics
from core.metrics_server import MetricsServer
from core.settings import Settings
from core.worker_runs import WorkerStopped, poll_until_stopped
from domain.deployments import DeploymentRegistration
from domain.enums import InvocationOutcome, UsageStatus
from domain.statements import ReconcilerInput
from store.db import create_engine, session_factory
from store.repositories import ModelDeploymentRepository
from tests.conftest import TokenFactory, free_port
from tests.helpers.catalog import register
from tests.helpers.deadline import UNBOUNDED, eventually
from tests.helpers.process import Proc
from tests.helpers.receipts import add_receipt
from tests.helpers.tcp_proxy import SeverableProxy
from worker import (
    build_closer_worker,
    build_invocation_worker,
    build_webhook_delivery_worker,
    build_webhook_poll_worker,
    build_worker,
    evaluation_adapters,
    usage_recount,
)
from workflows.deployment_lifecycle import DeploymentLifecycleWorkflow
from workflows.receipt_reconciler import ReceiptReconcilerWorkflow

PREFIX = "connectsoft_factory_model_gateway_"


async def test_worker_process_serves_registrations_and_drains_on_sigterm(
    settings: Settings, temporal_client: Client
) -> None:
    queue = f"worker-proc-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "MODEL_ROUTER_DATABASE_URL": settings.database_url,
        "MODEL_ROUTER_TEMPORAL_ADDRESS": settings.temporal_address,
        "MODEL_ROUTER_TEMPORAL_TASK_QUEUE": queue,
        "MODEL_ROUTER_SCHEDULES_ENABLED": "false",
        "MODEL_ROUTER_WORKER_METRICS_PORT": str(free_port()),
    }
    proc = Proc([sys.executable, "-c", "import worker; worker.main()"], env=env)
    try:
        proc.wait_for_line("worker polling", timeout=30)
        tenant = f"t-{uuid.uuid4().hex[:8]}"
        registration = DeploymentRegistration.model_validate(
            {
                "deploymentId": "vllm/pool-a/qwen",
                "provider": "vllm",
                "model": "qwen2.5-coder",
                "region": "eu",
                "privacyClass": "Local",
                "endpointRef": "pool:tenant-a/vllm",
            }
        )
        handle = await temporal_client.start_workflow(
            DeploymentLifecycleWorkflow.run,
            LifecycleInput(
                tenant_id=tenant,
                deployment_id="vllm/pool-a/qwen",
                registration=registration,
                idempotency_key="k",
            ),
            id=f"deployment/{tenant}/vllm/pool-a/qwen",
            task_queue=queue,
        )
        result = await handle.execute_update(
            DeploymentLifecycleWorkflow.register, RegisterRequest(idempotency_key="k")
        )
        assert result.created and result.deployment.state == "Candidate"
        retired = await handle.execute_update(DeploymentLifecycleWorkflow.retire)
        assert retired.state == "Retired"
    finally:
        code = proc.stop(timeout=40)
    assert code == 0, proc.output
    assert "worker stopped" in proc.output


def _gauge(text: str, provider: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(PREFIX + "usage_unknown") and f'provider="{provider}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return None


async def test_worker_serves_metrics_on_its_own_port_with_the_stores_usage_unknown(
    settings: Settings,
    temporal_client: Client,
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """usage_unknown is a count of the store on every process that exports it (here: receipts
    no process of this test wrote, as after a restart); the worker's reconciler metrics are
    scraped from the worker's own port."""
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    provider = f"p{uuid.uuid4().hex[:8]}"  # a provider of this test alone
    await register(http, auth, "gauge/dep", provider="vllm", model="m", endpointRef="pool:g")
    # The deployments table names the provider; vllm's adapter is not involved.
    async with sessions() as s, s.begin():
        row = await ModelDeploymentRepository(s, tenant).get("gauge/dep")
        assert row is not None
        row.provider = provider
    # Within the reconciler's lookback (72 h): older receipts are no run's to settle.
    at = datetime.now(UTC) - timedelta(hours=1)
    ids = [
        await add_receipt(
            sessions,
            tenant=tenant,
            deployment_id="gauge/dep",
            started_at=at,
            usage_status=status,
            provider_request_id=f"req-{i}",
        )
        for i, status in enumerate(
            [UsageStatus.UNKNOWN] * 3 + [UsageStatus.ESTIMATED, UsageStatus.REPORTED]
        )
    ]
    assert len(ids) == 5
    # A denial reached no provider: Estimated at zero tokens, it awaits no statement.
    await add_receipt(
        sessions,
        tenant=tenant,
        deployment_id="gauge/dep",
        started_at=at,
        usage_status=UsageStatus.ESTIMATED,
        outcome=InvocationOutcome.DENIED,
        input_tokens=0,
        output_tokens=0,
    )
    api_text = (await http.get("/metrics")).text
    assert _gauge(api_text, provider) == 4  # 3 Unknown + 1 Estimated, as the database says

    queue = f"worker-metrics-{uuid.uuid4().hex[:8]}"
    port = free_port()
    env = {
        **os.environ,
        "MODEL_ROUTER_DATABASE_URL": settings.database_url,
        "MODEL_ROUTER_TEMPORAL_ADDRESS": settings.temporal_address,
        "MODEL_ROUTER_TEMPORAL_TASK_QUEUE": queue,
        "MODEL_ROUTER_SCHEDULES_ENABLED": "false",
        "MODEL_ROUTER_WORKER_METRICS_PORT": str(port),
    }
    proc = Proc([sys.executable, "-c", "import worker; worker.main()"], env=env)
    try:
        proc.wait_for_line("worker polling", timeout=30)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as scrape:
            first = await scrape.get("/metrics")
            assert first.status_code == 200
            assert first.headers["content-type"].startswith("text/plain")
            assert _gauge(first.text, provider) == 4

            line = (
                f'{{"provider":"{provider}","providerRequestId":"req-0",'
                '"inputTokens":5,"outputTokens":1}\n'
            )
            imported = await http.post(
                "/factory/usage-statements",
                content=line,
                headers={**auth, "Content-Type": "application/x-ndjson"},
            )
            assert imported.status_code == 201, imported.text
            report = await temporal_client.execute_workflow(
                ReceiptReconcilerWorkflow.run,
                ReconcilerInput(tenant_ids=[tenant], as_of=at + timedelta(hours=1)),
                id=f"reconcile-worker-{uuid.uuid4().hex[:8]}",
                task_queue=queue,
            )
            assert report.settled == 1
            after = (await scrape.get("/metrics")).text
        assert _gauge(after, provider) == 3
        reconciled = [
            line
            for line in after.splitlines()
            if line.startswith(PREFIX + "receipts_reconciled") and provider in line
        ]
        assert reconciled and reconciled[0].endswith(" 1.0"), after
    finally:
        code = proc.stop(timeout=40)
    assert code == 0, proc.output
    assert f"worker metrics on http://127.0.0.1:{port}/metrics" in proc.output


async def test_a_worker_whose_run_ends_stops_the_others_and_the_process(
    settings: Settings,
    temporal_client: Client,
    sessions: async_sessionmaker[AsyncSession],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The process's five workers, as `run` polls them. One whose run ended on its own without
    raising left the process up, live and ready by its probe (the main queue's pollers), while
    that worker's queue (here the webhook polls') waited on nobody: now the others are shut
    down, the process exits non-zero, and the log names the queue."""
    run = uuid.uuid4().hex[:8]
    own = settings.model_copy(
        update={
            "temporal_task_queue": f"ends-{run}",
            "temporal_invocation_task_queue": f"ends-inv-{run}",
        }
    )
    adapters = evaluation_adapters(own)
    built = [
        build_worker(temporal_client, own, sessions, adapters=adapters),
        *(
            build(temporal_client, own, sessions)
            for build in (
                build_invocation_worker,
                build_closer_worker,
                build_webhook_poll_worker,
                build_webhook_delivery_worker,
            )
        ),
    ]
    stop = asyncio.Event()
    try:
        with caplog.at_level(logging.ERROR, logger="model_router.worker"):
            polling = asyncio.create_task(poll_until_stopped(built, stop))
            await eventually(lambda: all(w.is_running for w in built), timeout=UNBOUNDED)
            given_up = built[3]
            await given_up.shutdown()  # as a worker the SDK gave up on: its run ends
            with pytest.raises(WorkerStopped, match=given_up.task_queue):
                # Left as it was, the process waited for SIGTERM alone: this wait ran out.
                await asyncio.wait_for(polling, timeout=UNBOUNDED)
        assert all(w.is_shutdown for w in built)
        said = [r.getMessage() for r in caplog.records if r.name == "model_router.worker"]
        assert any(given_up.task_queue in line and "stopped" in line for line in said), said
    finally:
        stop.set()
        await asyncio.gather(*(w.shutdown() for w in built))
        await adapters.aclose()


async def test_the_worker_metrics_answer_while_the_store_hangs(settings: Settings) -> None:
    """A frozen store (connections open, nothing answering) held each scrape of the worker's
    /metrics for the usage recount's statement bound (60 s), past Prometheus's 10 s scrape
    timeout: every worker series vanished in the outage, each abandoned scrape's recount
    holding a connection. Now a scrape waits for the recount a bounded while, one recount at a
    time, and answers with the rest."""
    url = make_url(settings.database_url)
    assert url.host is not None and url.port is not None
    tag = f"t-{uuid.uuid4().hex[:8]}"
    registry = metrics.configure_exporters()
    metrics.denials.add(1, {"tenant": tag, "reason": "budget"})  # a series besides the recount's
    async with SeverableProxy(url.host, url.port) as proxy:
        # The worker's own engine, as `run` makes it, through the proxy.
        engine = create_engine(
            url.set(port=proxy.port).render_as_string(hide_password=False),
            pool_size=settings.database_pool_size,
            statement_timeout=settings.database_statement_timeout_seconds,
        )
        recount = usage_recount(settings, session_factory(engine))
        await recount()  # a pooled connection, as a running worker holds
        proxy.sever(partition=True)  # silent, held, and so is every new connection
        port = free_port()
        async with (
            MetricsServer("127.0.0.1", port, registry, recount),
            # Prometheus's default scrape timeout.
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as scrape,
        ):
            for _ in range(3):
                answered = await scrape.get("/metrics")
                assert answered.status_code == 200
                assert f'tenant="{tag}"' in answered.text
            # One recount waited on the store for the three scrapes, not one each.
            assert _checked_out(engine.pool) == 1
    # The server stopped, its recount still waiting is ended: nothing is left held.
    await eventually(lambda: _checked_out(engine.pool) == 0, timeout=UNBOUNDED)
    await engine.dispose()


def _checked_out(pool: Pool) -> int:
    assert isinstance(pool, QueuePool)  # PostgreSQL's pool
    return pool.checkedout()
