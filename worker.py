"""The worker process: connects to Temporal, registers workflows and activities, runs until
SIGINT/SIGTERM and then drains (in-flight activities finish before it exits). When one of its
workers stops on its own, it drains the others and exits 1, for its platform to restart it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Awaitable, Callable
from datetime import timedelta

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio import activity
from temporalio.client import Client
from temporalio.worker import Worker

from activities.adapter_pool import AdapterPool
from activities.evaluation import EvaluationActivities
from activities.invoke_closers import WorkflowCloses
from activities.invoke_setup import provider_timeouts
from activities.lifecycle import LifecycleActivities
from activities.probes import ProbeActivities
from activities.reconciliation import ReconciliationActivities
from activities.secret_policy import endpoint_broker
from activities.sweeper import SweeperActivities
from activities.webhook_polls import WebhookPolls
from activities.webhook_runs import keep_deliveries
from activities.webhook_types import deliveries_queue, polls_queue
from activities.webhooks import WebhookActivities, delivery_settings
from core import metrics, tracing
from core.logging import configure_logging
from core.metrics_server import MetricsServer
from core.schedules import ensure_schedules
from core.settings import Settings, get_settings
from core.temporal import connect
from core.temporal_rotation import TlsRotation
from core.worker_runs import WorkerStopped, poll_until_stopped
from domain.invocation import closer_queue
from providers.secrets import default_broker
from store.artifact_files import ArtifactFiles
from store.artifacts import EVIDENCE_DIR, ArtifactStore
from store.db import create_engine, session_factory
from store.receipt_statements import ReceiptStatements
from store.usage_gauge import recount_usage_unknown
from workflows.deployment_lifecycle import DeploymentLifecycleWorkflow
from workflows.evaluate import EvaluateDeploymentWorkflow
from workflows.health_probe import HealthProbeWorkflow
from workflows.receipt_reconciler import ReceiptReconcilerWorkflow
from workflows.receipt_sweeper import ReceiptSweeperWorkflow
from workflows.webhook_delivery import WebhookDeliveryWorkflow

log = logging.getLogger("model_router.worker")

# Subscriptions one worker's long polls may wait for at once: each slot is a coroutine asleep
# between looks (one statement a poll interval), not work, so the bound is the statements a
# second the database takes: 2,048 idle subscriptions at 2 s are some 1,000 a second.
WEBHOOK_POLL_SLOTS = 2048
# Deliveries one worker runs at once, on their own queue (activities/webhook_types.py,
# `deliveries_queue`): each holds a connection of the delivery client for up to its POST's
# timeout, and that client keeps at most 100 (httpx's default), so more slots would only wait
# for a connection inside their timeout. Past them, pages wait in Temporal's queue, each
# subscription's in order; probes, lifecycle steps and evaluations no longer wait behind them.
WEBHOOK_DELIVERY_SLOTS = 100

WORKFLOWS = [
    DeploymentLifecycleWorkflow,
    WebhookDeliveryWorkflow,
    HealthProbeWorkflow,
    ReceiptReconcilerWorkflow,
    EvaluateDeploymentWorkflow,
    ReceiptSweeperWorkflow,
]


def evaluation_adapters(settings: Settings) -> AdapterPool:
    """The provider clients the evaluation suite calls through; whoever runs the worker closes
    them when it stops (each holds an aiohttp session)."""
    return AdapterPool(
        endpoint_broker(settings),
        provider_timeouts(settings),
        settings.invoke_adapter_ttl_seconds,
        # The operator's setting, as invocations take it: left out, evaluations asked Anthropic
        # to cache whatever PROMPT_CACHING said.
        prompt_caching=settings.prompt_caching,
    )


def evaluation_records(settings: Settings) -> ArtifactFiles:
    """The evaluation records' files, written off the event loop on threads of their own and
    within a bound (store/artifact_files.py); whoever runs the worker closes them when it stops.
    Apart from answers: the answers' retention (the receipt sweeper) deleted them with the
    answers, the evidence a deployment's approval rests on."""
    return ArtifactFiles(ArtifactStore(settings.artifact_root / EVIDENCE_DIR))


def build_worker(
    client: Client,
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    http: httpx.AsyncClient | None = None,
    adapters: AdapterPool | None = None,
    records: ArtifactFiles | None = None,
) -> Worker:
    lifecycle = LifecycleActivities(sessions)
    webhooks = webhook_activities(settings, sessions, http)
    # Statement admin keys are the operator's settings; deployments' endpointRefs are bounded
    # by the allow-list (activities/secret_policy.py).
    broker = default_broker(allow_upstream=settings.allow_upstream_endpoints)
    endpoints = endpoint_broker(settings)
    probes = ProbeActivities(sessions, endpoints, settings.temporal_task_queue)
    # Usage APIs answer slowly for long ranges; they are providers, never redirect targets.
    statements = httpx.AsyncClient(timeout=60.0, follow_redirects=False)
    reconciliation = ReconciliationActivities(sessions, settings, broker, statements)
    sweeper = SweeperActivities(sessions, ArtifactStore(settings.artifact_root))

    async def this_client() -> Client:
        # The worker's client as it is now: one connected with rotated TLS files
        # (core/temporal_rotation.py) once there is one.
        return activity.client()

    evaluation = EvaluationActivities(
        sessions,
        adapters or evaluation_adapters(settings),
        records or evaluation_records(settings),
        this_client,
        settings.evaluation_context_token_cap,
    )
    return Worker(
        client,
        task_queue=settings.temporal_task_queue,
        workflows=WORKFLOWS,
        activities=[
            lifecycle.register_candidate,
            lifecycle.apply_transition,
            lifecycle.check_approval,
            # Histories from before the long poll look once, on this queue.
            WebhookPolls(sessions, delivery_settings(settings)).pending,
            # Histories from before the deliveries' own queue deliver on this one.
            webhooks.deliver,
            webhooks.deliver_batch,
            webhooks.advance,
            probes.targets,
            probes.probe,
            probes.apply_verdict,
            probes.prune,
            reconciliation.sources,
            reconciliation.fetch,
            reconciliation.window,
            reconciliation.gauge,
            sweeper.sweep,
            sweeper.prune,
            sweeper.prune_artifacts,
            evaluation.prepare,
            evaluation.run_case,
            evaluation.record,
            evaluation.rerank,
            evaluation.record_rerank,
            evaluation.fail,
        ],
        graceful_shutdown_timeout=timedelta(seconds=20),
    )


def build_invocation_worker(
    client: Client, settings: Settings, sessions: async_sessionmaker[AsyncSession]
) -> Worker:
    """Polls the invocations queue beside the API processes, so an invocation whose API process
    died is still carried to a closed receipt. It holds no requests: a provider call that lands
    here reports NOT_HERE and is never made."""
    from activities.invoke_hub import InvocationHub
    from activities.invoke_setup import INVOKE_WORKFLOW_RUNNER, invoke_activities
    from workflows.invoke import InvokeModelWorkflow

    activities, _ = invoke_activities(settings, sessions, InvocationHub())
    return Worker(
        client,
        task_queue=settings.temporal_invocation_task_queue,
        workflows=[InvokeModelWorkflow],
        workflow_runner=INVOKE_WORKFLOW_RUNNER,
        activities=[
            activities.call_provider,
            activities.closes.close_abandoned,
            activities.closes.finalize_receipt,
        ],
        graceful_shutdown_timeout=timedelta(seconds=20),
    )


def build_webhook_poll_worker(
    client: Client, settings: Settings, sessions: async_sessionmaker[AsyncSession]
) -> Worker:
    """The subscriptions' long polls (activities/webhook_polls.py), on a queue of their own:
    each idle subscription holds one slot while it waits, one statement a poll interval."""
    return Worker(
        client,
        task_queue=polls_queue(settings.temporal_task_queue),
        activities=[WebhookPolls(sessions, delivery_settings(settings)).pending],
        max_concurrent_activities=WEBHOOK_POLL_SLOTS,
        graceful_shutdown_timeout=timedelta(seconds=20),
    )


def webhook_activities(
    settings: Settings,
    sessions: async_sessionmaker[AsyncSession],
    http: httpx.AsyncClient | None = None,
) -> WebhookActivities:
    # Webhook receivers are third parties: never follow their redirects.
    return WebhookActivities(
        sessions,
        http or httpx.AsyncClient(follow_redirects=False),
        delivery_settings(settings),
        settings.webhook_allowed_private_networks,
        settings.webhook_end_after_failing_hours,
    )


def build_webhook_delivery_worker(
    client: Client, settings: Settings, sessions: async_sessionmaker[AsyncSession]
) -> Worker:
    """The subscriptions' deliveries, on a queue of their own with slots of their own
    (WEBHOOK_DELIVERY_SLOTS): receivers are third parties, and on the shared queue a few slow
    ones held the slots probes, lifecycle steps and evaluations wait for."""
    webhooks = webhook_activities(settings, sessions)
    return Worker(
        client,
        task_queue=deliveries_queue(settings.temporal_task_queue),
        activities=[webhooks.deliver, webhooks.deliver_batch],
        max_concurrent_activities=WEBHOOK_DELIVERY_SLOTS,
        graceful_shutdown_timeout=timedelta(seconds=20),
    )


def build_closer_worker(
    client: Client, settings: Settings, sessions: async_sessionmaker[AsyncSession]
) -> Worker:
    """Polls the closers queue (domain/invocation.closer_queue), which no API process polls: the
    closes an API process's store refused, retried here on this process's own connections."""
    closes = WorkflowCloses(ReceiptStatements(sessions.kw["bind"]))
    return Worker(
        client,
        task_queue=closer_queue(settings.temporal_invocation_task_queue),
        activities=[closes.finalize_receipt],
        graceful_shutdown_timeout=timedelta(seconds=20),
    )


def follow_tls_rotation(settings: Settings, workers: list[Worker]) -> TlsRotation:
    """The workers poll on a client connected with the TLS files as they are rotated
    (core/temporal_rotation.py); their activities ask `activity.client()` for it. Made before
    the first connect, since it reads the files in use as it is made (files rotated between the
    connect and a later read were taken as already in use), and started once `workers` holds
    the workers."""

    def swap(client: Client) -> None:
        for w in workers:
            w.client = client

    return TlsRotation(settings, swap)


async def run(settings: Settings) -> None:
    engine = create_engine(
        settings.database_url,
        pool_size=settings.database_pool_size,
        echo=settings.database_echo,
        statement_timeout=settings.database_statement_timeout_seconds,
    )
    polling: list[Worker] = []
    rotation = follow_tls_rotation(settings, polling)
    client = await connect(settings)
    if settings.schedules_enabled:
        for schedule, outcome in (await ensure_schedules(client, settings)).items():
            log.info("schedule %s %s", schedule, outcome)
    sessions = session_factory(engine)
    adapters = evaluation_adapters(settings)
    records = evaluation_records(settings)
    worker = build_worker(client, settings, sessions, adapters=adapters, records=records)
    invocations = build_invocation_worker(client, settings, sessions)
    closers = build_closer_worker(client, settings, sessions)
    polls = build_webhook_poll_worker(client, settings, sessions)
    deliveries = build_webhook_delivery_worker(client, settings, sessions)
    polling += [worker, invocations, closers, polls, deliveries]
    rotation.start()
    # Every active webhook subscription has its delivery running (activities/webhook_runs.py).
    upkeep = asyncio.create_task(keep_deliveries(lambda: worker.client, settings, sessions))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with contextlib.AsyncExitStack() as stack:
        # Last, however the block ends (a worker stopped on its own raises out of it): its
        # connections closed, not left to the collector at the loop's close.
        stack.push_async_callback(engine.dispose)
        stack.push_async_callback(adapters.aclose)  # after the workers have drained
        stack.callback(records.close)  # as well: no record is written past the drain
        stack.push_async_callback(rotation.aclose)
        stack.callback(upkeep.cancel)
        if _serves_metrics(settings):
            recount = usage_recount(settings, sessions)
            registry = metrics.configure_exporters(
                otlp_endpoint=settings.otlp_metrics_endpoint,
                otlp_interval_seconds=settings.otlp_export_interval_seconds,
            )
            host, port = settings.worker_metrics_host, settings.worker_metrics_port
            await stack.enter_async_context(
                MetricsServer(host, port, registry, recount, settings.metrics_token)
            )
            log.info("worker metrics on http://%s:%s/metrics", host, port)
        log.info("worker polling task queue %s", settings.temporal_task_queue)
        await poll_until_stopped(polling, stop)
    log.info("worker stopped")


def usage_recount(
    settings: Settings, sessions: async_sessionmaker[AsyncSession]
) -> Callable[[], Awaitable[None]]:
    """What the worker's /metrics runs before each scrape (core/metrics_server.py bounds its
    wait): the usage_unknown gauge counted from the store."""

    async def recount() -> None:
        await recount_usage_unknown(sessions, settings.reconciler_lookback_hours)

    return recount


def _serves_metrics(settings: Settings) -> bool:
    return settings.metrics_enabled and settings.worker_metrics_port != 0


def main() -> None:
    settings = get_settings()
    configure_logging(settings.log_level, json_lines=settings.log_json)
    if settings.otlp_metrics_endpoint:
        # Probes, the reconciler and finished invocations record metrics here: they are
        # served on the worker's own /metrics port and/or pushed over OTLP.
        metrics.configure_exporters(
            otlp_endpoint=settings.otlp_metrics_endpoint,
            otlp_interval_seconds=settings.otlp_export_interval_seconds,
        )
    tracing.configure_exporters(
        service_name="model-router", otlp_endpoint=settings.otlp_traces_endpoint
    )
    try:
        asyncio.run(run(settings))
    except WorkerStopped:
        # Logged as it stopped; the exit status is what restarts the process.
        sys.exit(1)
    finally:
        tracing.shutdown()


if __name__ == "__main__":
    main()
