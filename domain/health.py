"""Health-probe rules: probe windows, what a probe result does to a deployment, and the latency
statistics the router's latency term reads."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from domain.catalog import DeploymentStats
from domain.enums import DeploymentState, Modality
from domain.failures import BUSY
from domain.lifecycle import Transition

PROBED_STATES = (DeploymentState.APPROVED, DeploymentState.DEGRADED)


class ProbeOutcome(StrEnum):
    OK = "ok"
    FAILED = "failed"


class ProbeVerdict(StrEnum):
    """What the lifecycle is asked to do after a probe."""

    NONE = "none"
    DEGRADE = "probe_failed"
    RECOVER = "probe_recovered"

    @property
    def transition(self) -> Transition | None:
        return _TRANSITION_OF.get(self)


_TRANSITION_OF = {
    ProbeVerdict.DEGRADE: Transition.PROBE_FAILED,
    ProbeVerdict.RECOVER: Transition.PROBE_RECOVERED,
}


class ProbeTarget(BaseModel):
    tenant_id: str
    deployment_id: str
    provider: str
    model: str
    endpoint_ref: str
    state: DeploymentState
    modality: Modality = Modality.CHAT


class ProbeResult(BaseModel):
    tenant_id: str
    deployment_id: str
    outcome: ProbeOutcome
    latency_ms: int | None = None
    error_class: str | None = None
    # True when the window had been probed already and no request was sent.
    replayed: bool = False


class HealthProbeInput(BaseModel):
    """The schedule's argument, built from settings by `core.schedules`."""

    timeout_seconds: float = Field(default=10.0, gt=0)
    concurrency: int = Field(default=8, ge=1)
    attempts: int = Field(default=2, ge=1)
    retry_interval_seconds: float = Field(default=5.0, gt=0)
    window_seconds: int = Field(default=60, ge=1)
    sample_retention_hours: int = Field(default=72, ge=1)
    # None: every tenant. A list shards the probe (and keeps tests to their own tenant).
    tenant_ids: list[str] | None = None
    # The window is the run's start time, floored; given here only to re-run a past window.
    window_start: datetime | None = None
    # Probes still running this long after the run started are cut (their deployments judged
    # at a later run), so the verdicts of the rest land before the run's own timeout ends it
    # with none applied. None: no cut (a run started by hand waits for every probe).
    deadline_seconds: float | None = Field(default=None, gt=0)


def probe_window(at: datetime, width: timedelta) -> datetime:
    """The start of the window `at` falls in. Windows are aligned to the epoch, so every worker
    and every retry agrees on them: one probe result per deployment and window."""
    if at.tzinfo is None:
        raise ValueError("probe times are timezone-aware")
    step = int(width.total_seconds())
    if step <= 0:
        raise ValueError("a probe window has a positive width")
    seconds = int(at.timestamp())
    return datetime.fromtimestamp(seconds - seconds % step, UTC)


def verdict(state: DeploymentState, outcome: ProbeOutcome) -> ProbeVerdict:
    """Only a change is asked for; the lifecycle treats a repeat as a no-op anyway."""
    if outcome is ProbeOutcome.FAILED and state is DeploymentState.APPROVED:
        return ProbeVerdict.DEGRADE
    if outcome is ProbeOutcome.OK and state is DeploymentState.DEGRADED:
        return ProbeVerdict.RECOVER
    return ProbeVerdict.NONE


# Failures that say the deployment could not be reached at all, rather than that it answered
# badly (providers/errors.py's kinds).
UNREACHABLE = frozenset({"connection", "timeout"})
# The share of a run's probes that must fail unreachable, across at least two providers, for the
# failures to be taken for the prober's own network.
OWN_NETWORK_SHARE = 0.8


def own_network_suspected(probed: Sequence[tuple[ProbeTarget, ProbeResult]]) -> bool:
    """Whether this run's failures look like the probing worker's own network (its DNS, its
    egress) rather than the deployments': most of the probes that ran (`probed`: the target and
    its result) could not reach their deployment, on two providers or more. Providers rarely all
    fail at the same minute; a worker that lost its egress sees exactly that, and degrading
    every deployment on that evidence left the router refusing every call until the next run.
    Its Degrade verdicts are held: the deployments keep their state, and the next run decides.
    A provider-wide outage of one provider is not held: its deployments degrade as before.

    A Degraded deployment that fails again is left out of the share: its failure is its own
    outage, already judged. Counted, an hour-old outage of one provider made a second
    provider's new one look like the worker's even where a third provider answered, and held
    its verdicts for as long as the first lasted. Its provider still counts among those
    unreachable: with no provider answering, an old outage and a new one cannot be told from
    a worker that lost its egress, and degrading every deployment on that evidence is the
    outage this rule prevents (a held deployment that is really down is still reported by
    the API's breakers under traffic)."""
    providers, unreachable, fresh = _network_counts(probed)
    return _network_rule(len(providers), unreachable, fresh)


def _network_counts(probed: Sequence[tuple[ProbeTarget, ProbeResult]]) -> tuple[set[str], int, int]:
    """The network rule's terms: the providers some live probe could not reach, and of the fresh
    probes (live, and not a Degraded deployment failing again) those unreachable and all."""
    providers: set[str] = set()
    unreachable = fresh = 0
    for target, r in probed:
        if r.replayed:
            continue
        lost = r.outcome is ProbeOutcome.FAILED and r.error_class in UNREACHABLE
        if lost:
            providers.add(target.provider)
        if target.state is DeploymentState.DEGRADED and r.outcome is ProbeOutcome.FAILED:
            continue
        fresh += 1
        unreachable += lost
    return providers, unreachable, fresh


def _network_rule(providers: int, unreachable: int, fresh: int) -> bool:
    return providers >= 2 and unreachable > 0 and unreachable >= OWN_NETWORK_SHARE * fresh


def network_suspected(providers: int, unreachable: int, fresh: int) -> bool:
    """The network rule on its own terms, for evidence other than a probe run's (an API
    process's open breakers, domain.breaker `network_suspected`): `providers` failing
    unreachable, and of the evidence counted in the share, the `unreachable` failures and all
    of it (`fresh`). One rule for both: a process whose egress broke opened breakers on every
    provider it called, and its reports degraded each of them for the whole fleet."""
    return _network_rule(providers, unreachable, fresh)


def own_network_possible(
    probed: Sequence[tuple[ProbeTarget, ProbeResult]], pending: Sequence[ProbeTarget]
) -> bool:
    """Whether `own_network_suspected` may still come out true once the `pending` probes are in:
    with each of them failing to reach its deployment, the most any result adds to the rule (one
    that answers, fails otherwise, replays or is cut adds less). When even that leaves it false,
    the run's Degrade verdicts need not wait for the rest: one provider's hanging probes held a
    deployment failing at once elsewhere in the routes for the run's whole deadline."""
    providers, unreachable, fresh = _network_counts(probed)
    providers |= {t.provider for t in pending}
    # An Approved deployment's failure is fresh; a Degraded one's is left out of the share.
    counted = sum(t.state is not DeploymentState.DEGRADED for t in pending)
    return _network_rule(len(providers), unreachable + counted, fresh + counted)


def degrade_held(result: ProbeResult, network_suspected: bool) -> bool:
    """Whether a failed probe's Degrade verdict waits for the next run: the run's failures were
    taken for its own network, or the result was recorded by an earlier run of the window,
    which judged it (or held it) already. A second run in a window, replaying the failures the
    first one held, degraded them all after all."""
    return network_suspected or result.replayed


# A probe whose deployment's endpointRef did not resolve in the probing worker: no request was
# sent (activities/probes.py).
CREDENTIALS = "credentials"


def credentials_unresolved(result: ProbeResult) -> bool:
    """A probe that did not run: the worker could not resolve the deployment's credential. The
    worker's secrets are not the API processes' (a rollout missing the worker's secret volume,
    a variable added to the API's environment alone): taken for the deployment's failure, one
    worker's missing volume degraded every deployment the API processes served well. It says
    nothing of the provider, so its Degrade verdict is held, it counts for nothing in the
    network rule, as the API's calls do not count it in their breakers, and it is no sample
    (`sampled`). A reference wrong everywhere, or kept for other tenants since the deployment
    was registered (`secret_ref_tenants`), is a configuration error, not an outage: the worker
    logs it (the reference, never a secret) and counts it in `provider_errors` (class
    `credentials`) at every run, and each call that meets it is logged by its API process."""
    return result.outcome is ProbeOutcome.FAILED and result.error_class == CREDENTIALS


def answered_busy(result: ProbeResult) -> bool:
    """A probe answered as busy (a rate limit, Anthropic's overloaded): the deployment is there
    and serving others. At its limit under real traffic, it went Degraded, the router sent its
    traffic elsewhere, the next probe got through and it went Approved again, every few
    minutes: the flap the breaker's trials were spared (domain/failures.py's BUSY). It is still
    a sample, failed (`sampled`): the state is held, but the router's history term is the
    chance a call sent there now gets through, and a call sent to a deployment at its limit
    gets the same answer. Counted, a busy deployment draws a little less traffic while it is
    busy, smoothly over the stats window and without an event; left out, it would keep the
    score of one that answers while its callers' attempts are refused there."""
    return result.outcome is ProbeOutcome.FAILED and result.error_class in BUSY


def sampled(result: ProbeResult) -> bool:
    """Whether a probe's result is recorded as the window's sample, which the router's latency
    and history terms read (`LatencyStats.routing_stats`): not a probe that was never sent
    (`credentials_unresolved`). Recorded, a worker missing one secret, or a reference kept for
    other tenants, lowered the deployment's success rate every run for a provider no one had
    asked. A busy answer is a sample (`answered_busy`)."""
    return not credentials_unresolved(result)


class LatencyStats(BaseModel):
    """Probe latency of one deployment over a window: what a catalog snapshot builder maps
    onto the deployment's latency statistics (p95 drives the router's latency term)."""

    model_config = ConfigDict(frozen=True)

    tenant_id: str
    deployment_id: str
    latency_p50_ms: float | None = Field(default=None, ge=0)
    latency_p95_ms: float | None = Field(default=None, ge=0)
    latency_samples: int = Field(default=0, ge=0)
    probes: int = Field(default=0, ge=0)
    failures: int = Field(default=0, ge=0)

    def routing_stats(self) -> DeploymentStats:
        """What routing scores (domain/scoring.py): the latency term on the successful probes'
        p95, the history term on the probes that were sent (`sampled`). A probe is a real
        request to the deployment through its adapter, every two minutes whatever the traffic,
        so a deployment nobody calls has a history too, and one call's luck does not make it."""
        return DeploymentStats(
            tenant_id=self.tenant_id,
            deployment_id=self.deployment_id,
            latency_p50_ms=self.latency_p50_ms,
            latency_p95_ms=self.latency_p95_ms,
            latency_samples=self.latency_samples,
            attempts=self.probes,
            successes=self.probes - self.failures,
        )


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile: always an observed value, stable for small samples."""
    if not 0 < q <= 100:
        raise ValueError("q is in (0, 100]")
    if not values:
        return None
    ordered = sorted(values)
    rank = math.ceil(q / 100 * len(ordered))
    return float(ordered[max(rank, 1) - 1])


def latency_stats(
    tenant_id: str, deployment_id: str, samples: Sequence[tuple[ProbeOutcome, int | None]]
) -> LatencyStats:
    """Latency counts successful probes only: a failure's time says how fast it failed."""
    ok = [float(ms) for outcome, ms in samples if outcome is ProbeOutcome.OK and ms is not None]
    return LatencyStats(
        tenant_id=tenant_id,
        deployment_id=deployment_id,
        latency_p50_ms=percentile(ok, 50),
        latency_p95_ms=percentile(ok, 95),
        latency_samples=len(ok),
        probes=len(samples),
        failures=sum(1 for outcome, _ in samples if outcome is ProbeOutcome.FAILED),
    )


# A probe is stale past this many of its schedule's periods (and never before 10 minutes):
# the schedule is paused, deleted or failing, and the result shown is that old.
STALE_AFTER_PERIODS = 5


def probe_stale(
    state: DeploymentState, probed_at: datetime, now: datetime, period_minutes: int
) -> bool:
    """Whether a deployment's last probe is older than its probes' schedule explains. Only a
    probed state's: a Retired or Candidate deployment is not probed, its last sample kept."""
    if state not in PROBED_STATES:
        return False
    limit = max(timedelta(minutes=10), timedelta(minutes=period_minutes * STALE_AFTER_PERIODS))
    return now - probed_at > limit
