"""The schedules on the real dev server: created once and left alone by a second worker,
updated (keeping the operator's pause) when settings change, the cadence over a whole day,
and the operator CLI.

The cadence is the server's own: the time-skipping test server does not implement schedules
(CreateSchedule is "unimplemented"; temporalio/sdk-java#1954), so the day is evaluated by the
dev server's ListScheduleMatchingTimes on the real schedules, and a backfill shows that each
matching time starts the job's workflow with its argument on its task queue.
"""

from __future__ import annotations

import asyncio
import errno
import os
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.api.workflowservice.v1 import ListScheduleMatchingTimesRequest
from temporalio.client import Client, ScheduleBackfill, ScheduleOverlapPolicy
from temporalio.service import RPCError
from temporalio.worker import Worker
from typer.testing import CliRunner, Result

from activities.sweeper import SweeperActivities
from cli.main import app
from core.schedules import (
    HEALTH_PROBE,
    RECONCILER,
    SWEEPER,
    current_fingerprint,
    desired_schedules,
    ensure_schedules,
    schedule_id,
)
from core.settings import Settings, get_settings
from domain.health import HealthProbeInput
from domain.statements import ReconcilerInput
from store.artifacts import ArtifactStore
from store.db import create_engine, session_factory
from tests.helpers.deadline import eventually
from tests.helpers.tcp_proxy import SeverableProxy
from workflows.receipt_sweeper import ReceiptSweeperWorkflow

DAY = datetime(2026, 11, 30, tzinfo=UTC)


@pytest.fixture
async def scheduled(settings: Settings, temporal_client: Client) -> AsyncIterator[Settings]:
    """Settings with a prefix of this test's own, and its schedules deleted afterwards."""
    mine = settings.model_copy(update={"schedule_id_prefix": f"mr-test-{uuid.uuid4().hex[:8]}"})
    yield mine
    for name in (HEALTH_PROBE, RECONCILER, SWEEPER):
        try:
            await temporal_client.get_schedule_handle(schedule_id(mine, name)).delete()
        except RPCError:
            pass


async def _matching(client: Client, sid: str, start: datetime, end: datetime) -> list[datetime]:
    """The times in [start, end) the server's schedule matches (its range excludes the start)."""
    begin, finish = Timestamp(), Timestamp()
    begin.FromDatetime(start - timedelta(seconds=1))
    finish.FromDatetime(end - timedelta(seconds=1))
    resp = await client.workflow_service.list_schedule_matching_times(
        ListScheduleMatchingTimesRequest(
            namespace=client.namespace, schedule_id=sid, start_time=begin, end_time=finish
        )
    )
    return [t.ToDatetime().replace(tzinfo=UTC) for t in resp.start_time]


async def test_a_second_worker_changes_nothing_and_new_settings_keep_the_pause(
    scheduled: Settings, temporal_client: Client
) -> None:
    # A queue nobody polls: a tick during the test must not probe the session's deployments.
    scheduled = scheduled.model_copy(update={"temporal_task_queue": f"idle-{uuid.uuid4().hex}"})
    ids = [schedule_id(scheduled, n) for n in (HEALTH_PROBE, RECONCILER, SWEEPER)]
    assert await ensure_schedules(temporal_client, scheduled) == dict.fromkeys(ids, "created")
    assert await ensure_schedules(temporal_client, scheduled) == dict.fromkeys(ids, "unchanged")
    probe = temporal_client.get_schedule_handle(ids[0])
    described = await probe.describe()
    assert described.info.last_updated_at is None
    assert described.schedule.policy.overlap is ScheduleOverlapPolicy.SKIP
    reconciler = await temporal_client.get_schedule_handle(ids[1]).describe()
    assert reconciler.schedule.policy.overlap is ScheduleOverlapPolicy.BUFFER_ONE
    sweeper = await temporal_client.get_schedule_handle(ids[2]).describe()
    assert sweeper.schedule.policy.overlap is ScheduleOverlapPolicy.SKIP

    await probe.pause(note="provider maintenance")
    changed = scheduled.model_copy(
        update={"health_probe_cron": "*/5 * * * *", "health_probe_timeout_seconds": 3.0}
    )
    outcome = await ensure_schedules(temporal_client, changed)
    assert outcome == {ids[0]: "updated", ids[1]: "unchanged", ids[2]: "unchanged"}
    after = await probe.describe()
    assert after.schedule.state.paused and after.schedule.state.note == "provider maintenance"
    assert current_fingerprint(temporal_client, after) == desired_schedules(changed)[0].fingerprint
    (arg,) = temporal_client.data_converter.payload_converter.from_payloads(
        list(after.schedule.action.args)  # type: ignore[attr-defined]
    )
    assert arg["timeout_seconds"] == 3.0
    minutes = {
        t.minute for t in await _matching(temporal_client, ids[0], DAY, DAY + timedelta(hours=1))
    }
    assert minutes == set(range(0, 60, 5))
    assert await ensure_schedules(temporal_client, changed) == dict.fromkeys(ids, "unchanged")


async def test_over_a_day_the_probe_runs_every_two_minutes_and_the_reconciler_at_half_past(
    scheduled: Settings, temporal_client: Client
) -> None:
    queue = f"unpolled-{uuid.uuid4().hex[:8]}"  # the cadence, not the jobs, is under test
    await ensure_schedules(temporal_client, scheduled, task_queue=queue)
    probe_id, reconciler_id = (schedule_id(scheduled, n) for n in (HEALTH_PROBE, RECONCILER))
    for sid in (probe_id, reconciler_id):
        await temporal_client.get_schedule_handle(sid).pause(note="backfill only")

    probe_times = await _matching(temporal_client, probe_id, DAY, DAY + timedelta(days=1))
    assert probe_times == [DAY + timedelta(minutes=2 * i) for i in range(720)]
    reconciler_times = await _matching(temporal_client, reconciler_id, DAY, DAY + timedelta(days=1))
    assert reconciler_times == [DAY + timedelta(hours=h, minutes=30) for h in range(24)]

    # Each matching time starts the job: 10 minutes of probes, 3 hours of reconciliations.
    windows = {probe_id: timedelta(minutes=10), reconciler_id: timedelta(hours=3)}
    for sid, span in windows.items():
        await temporal_client.get_schedule_handle(sid).backfill(
            # A backfill's range includes its end.
            ScheduleBackfill(
                start_at=DAY,
                end_at=DAY + span - timedelta(seconds=1),
                overlap=ScheduleOverlapPolicy.ALLOW_ALL,
            )
        )

    async def started(sid: str, expected: int) -> list[tuple[str, str, str]] | None:
        found = [
            (w.id, w.workflow_type, w.task_queue)
            async for w in temporal_client.list_workflows(f"TemporalScheduledById = '{sid}'")
        ]
        return sorted(found) if len(found) == expected else None

    probes = await eventually(lambda: started(probe_id, 5), timeout=30, interval=0.3)
    reconciles = await eventually(lambda: started(reconciler_id, 3), timeout=30, interval=0.3)
    assert probes == [
        (f"{probe_id}-2026-11-30T00:{m:02d}:00Z", "DeploymentHealthProbe", queue)
        for m in range(0, 10, 2)
    ]
    assert reconciles == [
        (f"{reconciler_id}-2026-11-30T{h:02d}:30:00Z", "ReceiptReconciler", queue) for h in range(3)
    ]
    await asyncio.gather(
        *(temporal_client.get_workflow_handle(wid).terminate() for wid, _, _ in probes + reconciles)
    )


async def _cli(env: dict[str, str], *args: str) -> Result:
    def invoke() -> Result:
        get_settings.cache_clear()
        try:
            return CliRunner().invoke(app, list(args), env=env)
        finally:
            get_settings.cache_clear()

    return await asyncio.to_thread(invoke)


async def test_operators_list_pause_resume_and_trigger_from_the_cli(
    scheduled: Settings, temporal_client: Client, worker: None, tenant: str
) -> None:
    # The jobs run on the test worker, limited to a tenant without deployments or receipts.
    await ensure_schedules(
        temporal_client,
        scheduled,
        probe=HealthProbeInput(tenant_ids=[tenant]),
        reconciler=ReconcilerInput(tenant_ids=[tenant]),
    )
    env = {
        "MODEL_ROUTER_TEMPORAL_ADDRESS": scheduled.temporal_address,
        "MODEL_ROUTER_SCHEDULE_ID_PREFIX": scheduled.schedule_id_prefix,
        "COLUMNS": "250",
    }
    listed = await _cli(env, "schedules", "list")
    assert listed.exit_code == 0, listed.output
    assert "*/2 * * * *" in listed.output and "30 * * * *" in listed.output
    assert "SKIP" in listed.output and "BUFFER_ONE" in listed.output

    # The note is the operator's text, shown as typed: "[ops]" was read as markup and vanished.
    note = "[ops] statement outage"
    paused = await _cli(env, "schedules", "pause", RECONCILER, "--note", note)
    assert paused.exit_code == 0, paused.output
    listed = await _cli(env, "schedules", "list")
    assert "paused" in listed.output and note in listed.output
    resumed = await _cli(env, "schedules", "resume", RECONCILER)
    assert resumed.exit_code == 0
    handle = temporal_client.get_schedule_handle(schedule_id(scheduled, RECONCILER))
    assert not (await handle.describe()).schedule.state.paused

    triggered = await _cli(env, "schedules", "trigger", HEALTH_PROBE)
    assert triggered.exit_code == 0, triggered.output
    probe_id = schedule_id(scheduled, HEALTH_PROBE)

    async def completed() -> bool:
        async for w in temporal_client.list_workflows(f"TemporalScheduledById = '{probe_id}'"):
            return w.status is not None and w.status.name == "COMPLETED"
        return False

    await eventually(completed, timeout=30, interval=0.3)
    unknown = await _cli(env, "schedules", "pause", "nightly-cleanup")
    assert unknown.exit_code == 2 and "Unknown schedule" in unknown.output


class ReadOnlyVolume(ArtifactStore):
    """The artifact volume mounted read-only on the worker: every purge refused."""

    def purge_slot(self, slot: str, max_age_seconds: float) -> int:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self.root / slot))


async def test_trigger_wait_exits_1_naming_the_prunes_a_sweep_left(
    scheduled: Settings,
    temporal_client: Client,
    sessions: async_sessionmaker[AsyncSession],
    tmp_path: Path,
) -> None:
    """The sweeper completes when a prune fails every attempt and names it in its report
    (`prune_failures`): `trigger --wait` read only the reconciler's failures, and exited 0."""
    # Its prunes fail every time (a store without the run events' table, a read-only volume),
    # on a queue of this test's own, which only the sweeper's schedule starts runs on.
    queue = f"sweeper-cli-{uuid.uuid4().hex[:8]}"
    (sweeper,) = [
        want
        for want in desired_schedules(scheduled, task_queue=queue)
        if want.schedule_id == schedule_id(scheduled, SWEEPER)
    ]
    await temporal_client.create_schedule(sweeper.schedule_id, sweeper.schedule)
    unmigrated = create_engine(f"sqlite+aiosqlite:///{tmp_path}/unmigrated.db")
    sweeping = SweeperActivities(sessions)
    failing = SweeperActivities(session_factory(unmigrated), ReadOnlyVolume(tmp_path))
    worker = Worker(
        temporal_client,
        task_queue=queue,
        workflows=[ReceiptSweeperWorkflow],
        activities=[sweeping.sweep, failing.prune, failing.prune_artifacts],
    )
    env = {
        "MODEL_ROUTER_TEMPORAL_ADDRESS": scheduled.temporal_address,
        "MODEL_ROUTER_SCHEDULE_ID_PREFIX": scheduled.schedule_id_prefix,
    }
    try:
        async with worker:
            result = await _cli(env, "schedules", "trigger", SWEEPER, "--wait", "--timeout", "120")
    finally:
        await unmigrated.dispose()
    assert result.exit_code == 1, result.output
    said = " ".join(result.stderr.split())
    assert "The run completed, but left" in said, said
    assert "prune_run_events undone (OperationalError)" in said, said
    assert "prune_artifacts undone (OSError)" in said, said
    assert "prune_failures" in result.stdout  # the report, printed as it is


async def test_temporal_lost_after_connecting_exits_2_as_out_of_reach(
    scheduled: Settings,
) -> None:
    """Temporal gone once the CLI had connected (its connection reset, its port then refusing
    connections): the RPC's UNAVAILABLE was printed as "Temporal refused" and exited 1, as a
    refusal does, where README says Temporal out of reach exits 2."""
    host, _, port = scheduled.temporal_address.rpartition(":")
    async with SeverableProxy(host, int(port)) as proxy:
        # The first request after connect's own (GetSystemInfo, on HTTP/2 stream 1) reaches the
        # server, and Temporal goes away before its answer. Told by its HEADERS frame (type 1,
        # END_HEADERS, stream 3): gRPC sends its paths Huffman-coded and its bodies gzipped, so
        # no text of the request shows on the wire.
        proxy.cut_request_with(b"\x01\x04\x00\x00\x00\x03", then_down=True)
        address = f"127.0.0.1:{proxy.port}"
        env = {
            "MODEL_ROUTER_TEMPORAL_ADDRESS": address,
            "MODEL_ROUTER_SCHEDULE_ID_PREFIX": scheduled.schedule_id_prefix,
        }
        listing = asyncio.create_task(_cli(env, "schedules", "list"))
        await eventually(lambda: not proxy.cut_pending(), timeout=30)
    # The proxy closed: its port refuses the client's reconnects outright (a reset after
    # accepting surfaces as UNKNOWN "transport error" instead).
    result = await asyncio.wait_for(listing, 120)  # the client's own retries, ~10 s
    assert result.exit_code == 2, result.output
    said = " ".join(result.stderr.split())
    assert f"Temporal at {address} is out of reach: UNAVAILABLE" in said, said
    assert "try again" in said and "Temporal refused" not in said, said
