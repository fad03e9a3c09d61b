"""Input and report of the receipt sweeper (plain pydantic models across the workflow boundary)."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, Field

# Past the start's own bound (`invoke_start_wait_seconds`), how much longer a receipt whose
# workflow does not exist is left before it counts as abandoned. It covers the one late close a
# call begun alongside a failed start still tries (activities/invoke_close.py), an event loop
# stalled under load, and the clock of the API host that stamped the claim against the worker's.
UNSTARTED_MARGIN_SECONDS = 25.0


def unstarted_bound(start_wait_seconds: float) -> float:
    """How long a claim may stay with no workflow before it counts as abandoned: the start's own
    bound and the margin. The sweeper closes such a claim past it; the API undoes a claim it
    gave up on that lands before it (api/given_up_claims.py)."""
    return start_wait_seconds + UNSTARTED_MARGIN_SECONDS


def unstarted_wait(open_for_seconds: float, start_wait_seconds: float) -> float | None:
    """For an open receipt whose InvokeModel workflow does not exist, open this long: None while
    its start may still be under way (within the start's own bound); else the seconds left until
    it counts as abandoned and the sweeper may close it (0 once it does). A retry of its key is
    told to come back then (api/replays.py): nothing else will close it."""
    if open_for_seconds < start_wait_seconds:
        return None
    return max(0.0, unstarted_bound(start_wait_seconds) - open_for_seconds)


class SweepInput(BaseModel):
    # A receipt open this long is past every budget its invocation had (the call's own budget,
    # the workflow's margin, a close retried through a short outage).
    open_longer_than_seconds: float = Field(gt=0)
    # A receipt open this long whose InvokeModel workflow was never started: its API process
    # died between the claim and Temporal's acceptance of the start (the provider call begins
    # alongside the start). Nothing else will ever close it, so it need not wait out the
    # budget. None: the same as `open_longer_than_seconds` (inputs of schedules made before).
    unstarted_longer_than_seconds: float | None = Field(default=None, gt=0)
    batch: int = Field(default=500, ge=1, le=10_000)
    # Batches one run reads at most, each past the last: 20 of 500, about 10,000 open receipts
    # (a Temporal describe each) within the activity's five minutes.
    pages: int = Field(default=20, ge=1, le=1_000)
    # A run's events older than this many days are deleted (store/event_retention.py); None:
    # kept (schedules made before, or retention off).
    run_event_retention_days: int | None = Field(default=None, ge=1)
    # Stored answers (the artifact store) older than this many days are deleted, one of their
    # ARTIFACT_SLOTS folders a run; None: kept (schedules made before, or retention off).
    artifact_retention_days: int | None = Field(default=None, ge=1)
    # How often the schedule runs (minutes): the artifact folders a run purges.
    period_minutes: int = Field(default=1, ge=1)

    @property
    def shortest(self) -> float:
        """The youngest a receipt may be and still be swept."""
        unstarted = self.unstarted_longer_than_seconds or self.open_longer_than_seconds
        return min(self.open_longer_than_seconds, unstarted)


class Workflow(StrEnum):
    """What Temporal says of a receipt's InvokeModel workflow."""

    RUNNING = "running"  # it will close the receipt itself
    ENDED = "ended"  # it failed, timed out or was terminated without closing it
    NEVER_STARTED = "never started"


# The longest an InvokeModel workflow runs. It closes its receipt as the call ends, so one still
# running a day on is wedged (a workflow task failing after an incompatible deploy, a close
# retried through a day-long outage): timed out, it is ENDED, and the sweeper closes its receipt.
# Without a bound the sweeper left such a receipt open for good ("every claim is closed by
# someone"), its key in progress. A day leaves a fix or the store's return time to close it with
# what the call knew; ten budgets, when a budget is set that long.
WORKFLOW_CEILING_SECONDS = 86_400.0


def workflow_ceiling_seconds(budget_seconds: float) -> float:
    return max(WORKFLOW_CEILING_SECONDS, 10 * budget_seconds)


def to_sweep(workflow: Workflow, open_for_seconds: float, data: SweepInput) -> bool:
    """Whether the sweeper closes a receipt open this long: never while its workflow runs; one
    whose workflow was never started once past `unstarted_longer_than_seconds`; any other past
    the whole budget."""
    if workflow is Workflow.RUNNING:
        return False
    limit = data.open_longer_than_seconds
    if workflow is Workflow.NEVER_STARTED and data.unstarted_longer_than_seconds is not None:
        limit = min(limit, data.unstarted_longer_than_seconds)
    return open_for_seconds >= limit


# The artifact store's folders under a tenant (the hash's first two hex digits): a run purges
# one of them, so a run's work is bounded whatever the store holds, and every stored answer is
# looked at once in 256 runs (four and a quarter hours at the sweeper's minute).
ARTIFACT_SLOTS = 256


def artifact_slot(minute: int) -> str:
    """The folder that is this minute's (minutes since the epoch) in the 256-minute round."""
    return f"{minute % ARTIFACT_SLOTS:02x}"


def artifact_slots(minute: int, period_minutes: int = 1) -> list[str]:
    """The folders a run in this minute (minutes since the epoch) purges, its schedule running
    every `period_minutes`: the period's worth, so that every folder is purged once in 256
    minutes whatever the schedule (one a minute, by the minute, left the odd folders to a
    schedule every two minutes, three quarters of them to an hourly one). Runs that skip ticks
    (the schedule's SKIP overlap while a run is still going) are covered by the artifact store's
    cursor: the minutes since the last purge are purged too (store/artifacts.py)."""
    count = max(1, min(period_minutes, ARTIFACT_SLOTS))
    first = minute - minute % count
    return [artifact_slot(first + i) for i in range(count)]


class PruneArtifactsInput(BaseModel):
    retention_days: int = Field(ge=1)
    slots: list[str] = Field(min_length=1, max_length=ARTIFACT_SLOTS)


class SweepReport(BaseModel):
    # Run events past their retention deleted by this run.
    events_pruned: int = 0
    # Stored answers past their retention deleted by this run.
    artifacts_pruned: int = 0
    # The prunes that failed every attempt this run, each as "step: error type" (never the
    # error's text, which may name paths): housekeeping, left to the next run, so that a prune
    # failing the same way every time no longer holds the run (and, under SKIP, the sweeps of
    # the ticks it covered) until the run's timeout.
    prune_failures: list[str] = Field(default_factory=list)
    found: int = 0
    closed: int = 0
    # Still open, but their InvokeModel workflow is running and will close them itself.
    left_to_workflow: int = 0
