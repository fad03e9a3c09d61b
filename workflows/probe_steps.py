"""The health probe's steps as the workflow schedules them (workflows/health_probe.py): one
deployment's probe, every target's probes under the run's deadline, and one verdict applied
through the deployment's lifecycle. Side-effect free, as workflow code must be: each step is an
activity call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, is_cancelled_exception

with workflow.unsafe.imports_passed_through():
    from activities.probe_types import (
        PROBE_FAILED,
        ApplyVerdictInput,
        ApplyVerdictResult,
        HealthProbeReport,
        ProbeRequest,
    )
    from domain.health import HealthProbeInput, ProbeResult, ProbeTarget, ProbeVerdict

STORE_RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=500), maximum_attempts=5)
# Histories where probes start shuffled and are cut at HealthProbeInput.deadline_seconds.
PROBES_CUT_AT_DEADLINE = "probes-cut-at-deadline"


async def probe_all(
    targets: list[ProbeTarget],
    window: datetime,
    data: HealthProbeInput,
    slots: asyncio.Semaphore,
    landed: Callable[[int, ProbeResult | None], None] | None = None,
) -> list[ProbeResult | None]:
    """Every target's probe result, in the targets' order; None where the probe did not
    run, or was cut at the run's deadline. The probes start in a shuffled order, so a
    deadline cuts different deployments from run to run, not the same tail each time.
    `landed` is told each result (by the target's index) as it comes; never a cut one."""

    async def probed(i: int) -> ProbeResult | None:
        async with slots:
            result = await probe(targets[i], window, data)
        if landed is not None:
            landed(i, result)
        return result

    if not workflow.patched(PROBES_CUT_AT_DEADLINE) or data.deadline_seconds is None:
        return list(await asyncio.gather(*(probed(i) for i in range(len(targets)))))
    order = list(range(len(targets)))
    workflow.random().shuffle(order)
    tasks = {i: asyncio.ensure_future(probed(i)) for i in order}
    # Counted from the run's start, as the deadline is meant: listing the targets may have
    # taken its retries already.
    ran_for = workflow.now() - workflow.info().start_time
    left = max(timedelta(seconds=data.deadline_seconds) - ran_for, timedelta(seconds=1))
    try:
        await workflow.wait_condition(lambda: all(t.done() for t in tasks.values()), timeout=left)
    except TimeoutError:
        workflow.logger.warning(
            "probes still running at the run's deadline (%ss): %d cut, judged next run",
            data.deadline_seconds,
            sum(not t.done() for t in tasks.values()),
        )
    finally:
        # Cut, or the run itself cancelled: no probe outlives the wait.
        for task in tasks.values():
            if not task.done():
                task.cancel()
    settled = dict(
        zip(tasks, await asyncio.gather(*tasks.values(), return_exceptions=True), strict=True)
    )
    for outcome in settled.values():
        if isinstance(outcome, BaseException) and not is_cancelled_exception(outcome):
            raise outcome
    return [
        r if isinstance(r, ProbeResult) else None for r in map(settled.get, range(len(targets)))
    ]


async def apply_verdict(
    target: ProbeTarget, wanted: ProbeVerdict, report: HealthProbeReport
) -> None:
    try:
        applied: ApplyVerdictResult = await workflow.execute_activity(
            "probe_apply_verdict",
            ApplyVerdictInput(
                tenant_id=target.tenant_id, deployment_id=target.deployment_id, verdict=wanted
            ),
            result_type=ApplyVerdictResult,
            start_to_close_timeout=timedelta(seconds=40),
            retry_policy=STORE_RETRY,
        )
    except ActivityError as exc:
        if is_cancelled_exception(exc):
            raise
        # One verdict the store kept refusing: the others still land, and the run reports
        # (its samples pruned); this deployment is judged again at the next run.
        workflow.logger.warning(
            "verdict for %s/%s not applied: %s",
            target.tenant_id,
            target.deployment_id,
            type(exc.cause).__name__,
        )
        return
    if applied.applied:
        moved = report.degraded if wanted is ProbeVerdict.DEGRADE else report.recovered
        moved.append(f"{target.tenant_id}/{target.deployment_id}")


async def probe(
    target: ProbeTarget, window: datetime, data: HealthProbeInput
) -> ProbeResult | None:
    interval = timedelta(seconds=data.retry_interval_seconds)
    try:
        result: ProbeResult = await workflow.execute_activity(
            "probe_deployment",
            ProbeRequest(target=target, window_start=window, timeout_seconds=data.timeout_seconds),
            result_type=ProbeResult,
            # The adapter call is bounded by timeout_seconds; the rest is the store.
            start_to_close_timeout=timedelta(seconds=data.timeout_seconds + 15),
            retry_policy=RetryPolicy(
                initial_interval=interval,
                backoff_coefficient=1.0,
                maximum_interval=interval,
                maximum_attempts=data.attempts,
            ),
        )
        return result
    except ActivityError as exc:
        if is_cancelled_exception(exc):
            # Cut at the deadline, or the run cancelled: the caller decides which.
            raise
        cause = exc.cause
        if isinstance(cause, ApplicationError) and cause.type == PROBE_FAILED and cause.details:
            return ProbeResult.model_validate(cause.details[0])
        # The probe itself could not run (worker lost, store down): that says nothing about
        # the deployment, so its state is left alone until the next run.
        workflow.logger.warning(
            "probe of %s/%s did not run: %s",
            target.tenant_id,
            target.deployment_id,
            type(cause).__name__,
        )
        return None
