"""The activities a workflow ran, read from its history: each one's type, its task queue, how it
ended (completed, failed, timed out) and at which attempt."""

from __future__ import annotations

from typing import NamedTuple

from temporalio.client import Client

_ENDS = {
    f"activity_task_{end}_event_attributes": end for end in ("completed", "failed", "timed_out")
}


class ActivityRun(NamedTuple):
    activity: str
    queue: str
    end: str
    attempt: int


async def activity_runs(client: Client, workflow_id: str) -> list[ActivityRun]:
    scheduled: dict[int, tuple[str, str]] = {}
    attempts: dict[int, int] = {}
    runs: list[ActivityRun] = []
    async for e in client.get_workflow_handle(workflow_id).fetch_history_events():
        kind = e.WhichOneof("attributes") or ""
        if kind == "activity_task_scheduled_event_attributes":
            a = e.activity_task_scheduled_event_attributes
            scheduled[e.event_id] = (a.activity_type.name, a.task_queue.name)
        elif kind == "activity_task_started_event_attributes":
            started = e.activity_task_started_event_attributes
            attempts[started.scheduled_event_id] = started.attempt
        elif kind in _ENDS:
            at = getattr(e, kind).scheduled_event_id
            runs.append(ActivityRun(*scheduled[at], _ENDS[kind], attempts.get(at, 0)))
    return runs
