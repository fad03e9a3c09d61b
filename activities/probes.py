"""Health-probe activities: list what to probe, send one minimal request through the
deployment's real adapter, record the sample, and hand the verdict to the lifecycle workflow.

A probe is never an invocation: it writes no receipt, reserves no budget and emits no
ModelInvoked. The request is a fixed word of ours, never a customer's content.

A probe resolves the deployment's credential as its tenant's (`secret_policy.for_tenant`): a
reference kept for other tenants since the deployment was registered is not resolved, and the
probe is not sent (`credentials`). A probe that was not sent records no sample either
(domain/health.py, `sampled`): it says nothing of the provider, so it must not count in the
router's history term.
"""

from __future__ import annotations

import asyncio
import logging
import time
from functools import partial

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.lifecycle_client import LifecycleClient, LifecycleClosed, LifecycleRefused
from activities.probe_types import (
    PROBE_FAILED,
    ApplyVerdictInput,
    ApplyVerdictResult,
    ListTargetsInput,
    ProbeRequest,
    PruneInput,
)
from activities.secret_policy import for_tenant
from core import metrics
from domain.deployments import DeploymentRecord
from domain.enums import Modality
from domain.health import CREDENTIALS, ProbeOutcome, ProbeResult, ProbeTarget, sampled
from providers.base import ProviderAdapter
from providers.errors import ErrorKind, ProviderError
from providers.registry import adapter_kind, resolve_adapter
from providers.secrets import SecretBroker, SecretResolutionError
from providers.types import ChatRequest, Message, ProviderTimeouts
from store import probes
from store.db import transaction
from store.repositories import ModelDeploymentRepository
from store.views import deployment_record

_PING = ChatRequest(messages=(Message(role="user", content="ping"),), max_tokens=1)
log = logging.getLogger("model_router.probes")


async def _ping(adapter: ProviderAdapter, modality: Modality) -> None:
    if modality is Modality.EMBEDDING:
        await adapter.embed(["ping"])
    elif modality is Modality.RERANK:
        await adapter.rerank("ping", ["pong"], top_n=1)
    else:
        await adapter.complete(_PING)


async def send_probe(
    broker: SecretBroker, target: ProbeTarget, seconds: float
) -> tuple[ProbeResult, bool, str]:
    """One minimal request through a fresh adapter of the deployment: the result, whether a
    failure is transient, and a message naming the error class (never content). Also the
    breaker's recovery trial (`activities/breaker_recovery.py`), so both judge health alike."""
    started = time.perf_counter()
    error: str | None = None
    transient, message = False, "ok"
    try:
        # A reranker can only rerank: one no active profile lists got the chat request other
        # unlisted deployments get, failed it as unsupported and went Degraded.
        modality = target.modality
        if adapter_kind(target.provider, modality) == "rerank":
            modality = Modality.RERANK
        adapter = await resolve_adapter(
            # Whether the tenant may still name the reference is asked before it is read: the
            # allow-list's owners may have changed since registration (a refusal is
            # `credentials`, below, as a reference that does not resolve).
            for_tenant(broker, target.tenant_id),
            provider=target.provider,
            model=target.model,
            endpoint_ref=target.endpoint_ref,
            timeouts=ProviderTimeouts(connect=seconds, read=seconds),
            modality=modality,
        )
        try:
            await asyncio.wait_for(_ping(adapter, modality), seconds)
        finally:
            await adapter.aclose()
    except ProviderError as exc:
        error, transient, message = exc.kind.value, exc.transient, str(exc)
    except TimeoutError:
        error, transient, message = ErrorKind.TIMEOUT.value, True, f"no answer in {seconds}s"
    except SecretResolutionError as exc:
        # The reference names where the key lives, never the key.
        error, message = CREDENTIALS, str(exc)
    elapsed_ms = round((time.perf_counter() - started) * 1000)
    result = ProbeResult(
        tenant_id=target.tenant_id,
        deployment_id=target.deployment_id,
        outcome=ProbeOutcome.FAILED if error else ProbeOutcome.OK,
        latency_ms=elapsed_ms,
        error_class=error,
    )
    return result, transient, message


class ProbeActivities:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        broker: SecretBroker,
        lifecycle_queue: str | None = None,
    ) -> None:
        # Where the lifecycle workflows run, for one started again (LifecycleClient's
        # `resume`): the worker's queue; None, this activity's own.
        self._lifecycle_queue = lifecycle_queue
        self._sessions = sessions
        self._broker = broker

    @activity.defn(name="probe_targets")
    async def targets(self, data: ListTargetsInput) -> list[ProbeTarget]:
        async with self._sessions() as session:
            return await probes.probe_targets(session, data.tenant_ids)

    @activity.defn(name="probe_deployment")
    async def probe(self, data: ProbeRequest) -> ProbeResult:
        """Returns a successful probe; raises ProbeFailed (details: the result) for a failed
        one, so the workflow's fixed-interval retry policy decides whether to try again and
        the attempt in the UI names the adapter's error class."""
        target, attempt = data.target, activity.info().attempt
        if attempt == 1:
            # Another run already probed this window (a manual trigger, a re-run): reuse it.
            async with self._sessions() as session:
                seen = await probes.find_sample(
                    session, target.tenant_id, target.deployment_id, data.window_start
                )
            if seen is not None:
                replay = ProbeResult(
                    tenant_id=target.tenant_id,
                    deployment_id=target.deployment_id,
                    outcome=ProbeOutcome(seen.outcome),
                    latency_ms=seen.latency_ms,
                    error_class=seen.error_class,
                    replayed=True,
                )
                return _raise_if_failed(replay, transient=False, message="recorded")
        result, transient, message = await send_probe(self._broker, target, data.timeout_seconds)
        if sampled(result):
            async with transaction(self._sessions) as session:
                await probes.record_sample(session, result, data.window_start, attempt)
        _observe(target, result)
        if result.error_class == CREDENTIALS:
            # Held, not degraded (domain/health.py, credentials_unresolved), and no sample: this
            # line and the `credentials` count are how an operator learns of a reference that
            # is wrong, or kept for other tenants since the deployment was registered.
            log.warning(
                "probe of %s/%s not sent, its credentials did not resolve in this worker: %s",
                target.tenant_id,
                target.deployment_id,
                message,
                extra={
                    "deployment": target.deployment_id,
                    "provider": target.provider,
                    "error_class": CREDENTIALS,
                },
            )
        return _raise_if_failed(result, transient=transient, message=message)

    @activity.defn(name="probe_apply_verdict")
    async def apply_verdict(self, data: ApplyVerdictInput) -> ApplyVerdictResult:
        """Transitions go through the deployment's lifecycle workflow, which writes the row and
        its DeploymentStateChanged event in one transaction (and ignores repeats)."""
        transition = data.verdict.transition
        if transition is None:
            return ApplyVerdictResult(applied=False, reason="no verdict")
        try:
            # The worker's client as it is now: one connected with rotated TLS files
            # (core/temporal_rotation.py) once there is one.
            record = await LifecycleClient(activity.client()).transition(
                data.tenant_id,
                data.deployment_id,
                transition,
                # A lifecycle whose workflow is gone is started again, so the verdict lands.
                resume=(
                    self._lifecycle_queue or activity.info().task_queue,
                    partial(self._stored, data),
                ),
            )
        except LifecycleRefused as exc:
            if exc.illegal:
                # Retired (or otherwise moved on) since the probe listed it: nothing to do.
                return ApplyVerdictResult(applied=False, reason=exc.message)
            raise
        except LifecycleClosed:
            return ApplyVerdictResult(applied=False, reason="lifecycle workflow closed")
        return ApplyVerdictResult(applied=True, state=record.state)

    async def _stored(self, data: ApplyVerdictInput) -> DeploymentRecord | None:
        async with self._sessions() as session:
            row = await ModelDeploymentRepository(session, data.tenant_id).get(data.deployment_id)
        return deployment_record(row) if row is not None else None

    @activity.defn(name="probe_prune")
    async def prune(self, data: PruneInput) -> int:
        async with transaction(self._sessions) as session:
            return await probes.prune_samples(session, data.older_than)


def _raise_if_failed(result: ProbeResult, *, transient: bool, message: str) -> ProbeResult:
    if result.outcome is ProbeOutcome.OK:
        return result
    raise ApplicationError(
        f"probe failed ({result.error_class}): {message}",
        result.model_dump(mode="json"),
        type=PROBE_FAILED,
        non_retryable=not transient,
    )


def _observe(target: ProbeTarget, result: ProbeResult) -> None:
    attrs = {"provider": target.provider, "deployment": target.deployment_id}
    metrics.probe_outcomes.add(1, {**attrs, "outcome": result.outcome.value})
    if result.outcome is ProbeOutcome.OK and result.latency_ms is not None:
        metrics.probe_latency.record(result.latency_ms / 1000, attrs)
    elif result.error_class is not None:
        metrics.provider_errors.add(1, {"provider": target.provider, "class": result.error_class})
