"""The Temporal Schedules of the scheduled jobs, created or updated idempotently at worker
start: `PREFIX/deployment-health-probe`, `PREFIX/receipt-reconciler` and
`PREFIX/receipt-sweeper`.

Idempotent: each schedule's action carries a fingerprint of everything we configure (workflow,
argument, task queue, spec, policy) in its memo. A worker that finds the schedule with the same
fingerprint leaves it alone, so a second worker or a restart changes nothing; a different
fingerprint (settings changed) updates it, keeping its paused state and note, which belong to
the operator.

Overlap policies, chosen per job:
- health probe: SKIP. A probe still running when the next tick comes is waiting on slow
  providers; a second one would probe the same deployments and race the same transitions, and
  a buffered probe would only report stale news. The next tick is two minutes away.
- receipt sweeper: SKIP. One sweep covers every receipt open past the budget; a sweep still
  running (the store or Temporal is down, so it retries) needs no second one beside it.
- reconciler: BUFFER_ONE. Settling is idempotent and covers everything pending, so a run that
  overruns the hour (a large backlog, a statement source backing off) is followed by exactly one
  more as soon as it ends, instead of the backlog waiting for the next :30 or runs piling up.
Catch-up windows are short for the same reasons: a probe missed during an outage is worthless
later, and one reconciler run catches up everything anyway.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from datetime import timedelta
from typing import Any

from pydantic import BaseModel
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleDescription,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleUpdate,
    ScheduleUpdateInput,
)

from core.schedule_spec import period_minutes
from core.settings import Settings
from domain.health import HealthProbeInput
from domain.statements import ReconcilerInput
from domain.sweep import SweepInput, unstarted_bound

HEALTH_PROBE = "deployment-health-probe"
RECONCILER = "receipt-reconciler"
SWEEPER = "receipt-sweeper"
NAMES = (HEALTH_PROBE, RECONCILER, SWEEPER)
FINGERPRINT = "modelRouterScheduleFingerprint"
# Cron fires at most once a minute, so one-minute probe windows give every scheduled run its
# own window, while a manual trigger in the same minute reuses that run's results.
PROBE_WINDOW_SECONDS = 60
# A probe run that hangs this long is abandoned, so SKIP cannot block probing for good.
PROBE_RUN_TIMEOUT = timedelta(minutes=10)
# Its probes are cut this long before that, leaving the verdicts and the prune time to land:
# the verdicts go 8 at a time (workflows/health_probe.py VERDICTS_AT_ONCE; each well under a
# second when the store answers), each at most 5 attempts of 40 s (about 3.5 minutes for one the
# store keeps refusing: more than 8 such verdicts outrun this time, none of them landing anyway,
# and the run times out), then the prune, 60 s an attempt. A hanging provider holds a probe
# about 25 s at the defaults (two 10 s attempts, 5 s apart), so at the default concurrency of 8
# some 190 deployments behind one hanging provider used the whole run up, and it timed out
# with not one of them Degraded.
PROBE_JUDGING_TIME = timedelta(minutes=4, seconds=30)


@dataclasses.dataclass(frozen=True)
class DesiredSchedule:
    schedule_id: str
    schedule: Schedule
    fingerprint: str


def schedule_id(settings: Settings, name: str) -> str:
    return f"{settings.schedule_id_prefix}/{name}"


def probe_input(settings: Settings) -> HealthProbeInput:
    return HealthProbeInput(
        timeout_seconds=settings.health_probe_timeout_seconds,
        concurrency=settings.health_probe_concurrency,
        attempts=settings.health_probe_attempts,
        retry_interval_seconds=settings.health_probe_retry_interval_seconds,
        window_seconds=PROBE_WINDOW_SECONDS,
        sample_retention_hours=settings.health_probe_sample_retention_hours,
        deadline_seconds=(PROBE_RUN_TIMEOUT - PROBE_JUDGING_TIME).total_seconds(),
    )


def reconciler_input(settings: Settings) -> ReconcilerInput:
    return ReconcilerInput(
        lookback_hours=settings.reconciler_lookback_hours,
        settle_delay_minutes=settings.reconciler_settle_delay_minutes,
        bucket_width=settings.reconciler_bucket_width,
        settle_zero_usage=settings.reconciler_settle_zero_usage,
        retry_max_interval_seconds=settings.reconciler_retry_max_interval_seconds,
    )


def sweep_input(settings: Settings) -> SweepInput:
    # The invocation's budget plus the workflow's own margin over it (workflows/invoke.py).
    budget = settings.default_timeout_seconds + 10
    return SweepInput(
        open_longer_than_seconds=budget + settings.receipt_sweeper_grace_seconds,
        unstarted_longer_than_seconds=unstarted_bound(settings.invoke_start_wait_seconds),
        run_event_retention_days=settings.run_event_retention_days or None,
        artifact_retention_days=settings.artifact_retention_days or None,
        period_minutes=period_minutes(settings.receipt_sweeper_cron),
    )


def _desired(
    sid: str,
    workflow: str,
    arg: BaseModel,
    task_queue: str,
    cron: str,
    policy: SchedulePolicy,
    run_timeout: timedelta,
) -> DesiredSchedule:
    fingerprint = hashlib.sha256(
        json.dumps(
            {
                "workflow": workflow,
                "arg": arg.model_dump(mode="json"),
                "taskQueue": task_queue,
                "cron": cron,
                "overlap": policy.overlap.name,
                "catchup": policy.catchup_window.total_seconds() if policy.catchup_window else None,
                "timeout": run_timeout.total_seconds(),
            },
            sort_keys=True,
        ).encode()
    ).hexdigest()[:32]
    action = ScheduleActionStartWorkflow(
        workflow,
        arg,
        id=sid,
        task_queue=task_queue,
        execution_timeout=run_timeout,
        memo={FINGERPRINT: fingerprint},
    )
    return DesiredSchedule(
        sid,
        Schedule(action=action, spec=ScheduleSpec(cron_expressions=[cron]), policy=policy),
        fingerprint,
    )


def desired_schedules(
    settings: Settings,
    *,
    task_queue: str | None = None,
    probe: HealthProbeInput | None = None,
    reconciler: ReconcilerInput | None = None,
) -> list[DesiredSchedule]:
    queue = task_queue or settings.temporal_task_queue
    return [
        _desired(
            schedule_id(settings, HEALTH_PROBE),
            "DeploymentHealthProbe",
            probe or probe_input(settings),
            queue,
            settings.health_probe_cron,
            SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP, catchup_window=timedelta(minutes=1)),
            PROBE_RUN_TIMEOUT,
        ),
        _desired(
            schedule_id(settings, RECONCILER),
            "ReceiptReconciler",
            reconciler or reconciler_input(settings),
            queue,
            settings.reconciler_cron,
            SchedulePolicy(
                overlap=ScheduleOverlapPolicy.BUFFER_ONE, catchup_window=timedelta(hours=1)
            ),
            timedelta(hours=3),
        ),
        _desired(
            schedule_id(settings, SWEEPER),
            "ReceiptSweeper",
            sweep_input(settings),
            queue,
            settings.receipt_sweeper_cron,
            SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP, catchup_window=timedelta(minutes=1)),
            timedelta(minutes=10),
        ),
    ]


def current_fingerprint(client: Client, description: ScheduleDescription) -> str | None:
    action = description.schedule.action
    memo: Any = getattr(action, "memo", None)
    payload = (memo or {}).get(FINGERPRINT)
    if payload is None:
        return None
    if isinstance(payload, str):
        return payload
    value = client.data_converter.payload_converter.from_payloads([payload])[0]
    return value if isinstance(value, str) else None


async def ensure_schedules(
    client: Client,
    settings: Settings,
    *,
    task_queue: str | None = None,
    probe: HealthProbeInput | None = None,
    reconciler: ReconcilerInput | None = None,
) -> dict[str, str]:
    """Creates or updates each schedule; returns id → created | updated | unchanged."""
    outcome: dict[str, str] = {}
    for want in desired_schedules(
        settings, task_queue=task_queue, probe=probe, reconciler=reconciler
    ):
        try:
            await client.create_schedule(want.schedule_id, want.schedule)
            outcome[want.schedule_id] = "created"
            continue
        except ScheduleAlreadyRunningError:
            pass
        handle = client.get_schedule_handle(want.schedule_id)
        if current_fingerprint(client, await handle.describe()) == want.fingerprint:
            outcome[want.schedule_id] = "unchanged"
            continue
        changed = False

        def updater(
            given: ScheduleUpdateInput, want: DesiredSchedule = want
        ) -> ScheduleUpdate | None:
            nonlocal changed
            # Re-checked on the latest description: another worker may have just done it.
            if current_fingerprint(client, given.description) == want.fingerprint:
                return None
            changed = True
            return ScheduleUpdate(
                schedule=dataclasses.replace(want.schedule, state=given.description.schedule.state)
            )

        await handle.update(updater)
        outcome[want.schedule_id] = "updated" if changed else "unchanged"
    return outcome
