"""DeploymentHealthProbe: started by its schedule (every 2 minutes by default); probes every
Approved and Degraded deployment and moves it Approved ⇄ Degraded through its lifecycle.

Probes run as one activity per deployment, at most `concurrency` at once, each retried at a
fixed interval (a single blip should not degrade a deployment, and the next run is minutes
away). The run's probe window (its start time, floored) is the idempotency key per deployment:
a second run in the same window reuses the recorded results instead of probing again.

When most probes could not reach their deployment, on several providers at once, the failures
are taken for this worker's own network and the Degrade verdicts are held (reported, the
deployments left as they are) for the next run to judge (domain/health.py). Each verdict lands
as soon as no probe still out can change it: a Recover at once, a Degrade once the network rule
can no longer hold it, at the latest when the run's probes are in; at most VERDICTS_AT_ONCE of
them at once, in the order they were reached. A probe whose credential did not resolve in this
worker did not run, and its verdict is held. A verdict the store keeps refusing is logged and
the others land.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from temporalio import workflow

from workflows.probe_steps import STORE_RETRY, apply_verdict, probe, probe_all

with workflow.unsafe.imports_passed_through():
    from activities.probe_types import (
        ApplyVerdictInput,
        ApplyVerdictResult,
        HealthProbeReport,
        ListTargetsInput,
        PruneInput,
    )
    from domain.health import (
        HealthProbeInput,
        ProbeOutcome,
        ProbeResult,
        ProbeTarget,
        ProbeVerdict,
        answered_busy,
        credentials_unresolved,
        degrade_held,
        own_network_possible,
        own_network_suspected,
        probe_window,
        verdict,
    )

# Histories where the verdicts were judged together, after every probe of the run.
VERDICTS_TOGETHER = "probe-verdicts-together"
# Histories where a probe answered busy (rate limited, overloaded) degrades nothing.
BUSY_IS_NO_VERDICT = "probe-busy-is-no-verdict"
# Histories where each verdict lands once no probe still out can change it, and a probe whose
# credential did not resolve holds its verdict (_judge_as_settled).
VERDICTS_AS_SETTLED = "probe-verdicts-as-settled"
# Histories where at most VERDICTS_AT_ONCE verdicts are applied at once (_judge_as_settled).
VERDICTS_BOUNDED = "probe-verdicts-bounded"
# Verdicts applied at once. Each `probe_apply_verdict` holds an activity slot of the worker's
# queue while it waits on the lifecycle's update, and that update needs one more slot on the
# same queue for its `apply_transition`. Applied all at once, as many Degrades as the worker has
# slots (100 by default: a provider gone, its Degrades waiting together until no probe still
# out could make them this worker's network) took every slot: no update could write its row,
# and none had landed 30 s later (tests/test_probe_verdict_concurrency.py), nor could the API's
# approvals, registrations and retirements, whose updates need a slot too. At 8, as many as the
# probes run by default, a run holds at most 8 slots for its verdicts and `concurrency` for its
# probes (16 of 100 by default); a worker with more than 8 slots always has one left for a
# lifecycle's own activity, so every verdict lands. Changing it changes when the run schedules
# its activities: behind a patch of its own.
VERDICTS_AT_ONCE = 8


@workflow.defn(name="DeploymentHealthProbe")
class HealthProbeWorkflow:
    @workflow.run
    async def run(self, data: HealthProbeInput) -> HealthProbeReport:
        window = data.window_start or probe_window(
            workflow.now(), timedelta(seconds=data.window_seconds)
        )
        targets: list[ProbeTarget] = await workflow.execute_activity(
            "probe_targets",
            ListTargetsInput(tenant_ids=data.tenant_ids),
            result_type=list[ProbeTarget],
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=STORE_RETRY,
        )
        report = HealthProbeReport(window_start=window, probed=len(targets))
        slots = asyncio.Semaphore(data.concurrency)
        if workflow.patched(VERDICTS_AS_SETTLED):
            await self._judge_as_settled(targets, window, data, slots, report)
        elif workflow.patched(VERDICTS_TOGETHER):
            await self._probe_then_judge(targets, window, data, slots, report)
        else:
            await self._judge_each(targets, window, data, slots, report)
        report.degraded.sort()
        report.recovered.sort()
        report.held.sort()
        await workflow.execute_activity(
            "probe_prune",
            PruneInput(older_than=window - timedelta(hours=data.sample_retention_hours)),
            result_type=int,
            start_to_close_timeout=timedelta(seconds=60),
            retry_policy=STORE_RETRY,
        )
        return report

    async def _probe_then_judge(
        self,
        targets: list[ProbeTarget],
        window: datetime,
        data: HealthProbeInput,
        slots: asyncio.Semaphore,
        report: HealthProbeReport,
    ) -> None:
        """Every probe first, then the verdicts, judged together: failures to reach most
        deployments of several providers at once are the prober's own network
        (domain/health.py), and its Degrade verdicts are held."""

        results = await probe_all(targets, window, data, slots)
        report.unprobed = sum(r is None for r in results)
        ran = [(t, r) for t, r in zip(targets, results, strict=True) if r is not None]
        hold = own_network_suspected(ran)
        held_for_network = 0
        wanted: list[tuple[ProbeTarget, ProbeVerdict]] = []
        for target, result in ran:
            if result.outcome is ProbeOutcome.OK:
                report.ok += 1
            else:
                report.failed += 1
            asked = verdict(target.state, result.outcome)
            busy = answered_busy(result) and workflow.patched(BUSY_IS_NO_VERDICT)
            if asked is ProbeVerdict.DEGRADE and (degrade_held(result, hold) or busy):
                report.held.append(f"{target.tenant_id}/{target.deployment_id}")
                held_for_network += not busy
            elif asked is not ProbeVerdict.NONE:
                wanted.append((target, asked))
        if hold:
            workflow.logger.warning(
                "%d of %d probes could not reach their deployment, on several providers: "
                "taken for this worker's own network, %d Degrade verdicts held",
                report.failed,
                len(ran),
                held_for_network,
            )
        await asyncio.gather(*(apply_verdict(t, v, report) for t, v in wanted))

    async def _judge_as_settled(
        self,
        targets: list[ProbeTarget],
        window: datetime,
        data: HealthProbeInput,
        slots: asyncio.Semaphore,
        report: HealthProbeReport,
    ) -> None:
        """Each verdict as soon as no probe still out can change it. A Recover at once: the
        network rule holds only Degrades. A Degrade once the rule cannot come out true whatever
        the probes still out return (domain/health.py, own_network_possible), else when the
        run's probes are in: judged together, a deployment failing at once stayed in the routes
        while another provider's probes hung, up to the run's deadline (5.5 minutes). A Degrade
        that no network can explain is held at once: a busy answer, a replayed result, and a
        credential this worker could not resolve (the probe did not run)."""
        out = dict(enumerate(targets))
        judged: list[tuple[ProbeTarget, ProbeResult]] = []  # what the network rule counts
        waiting: list[ProbeTarget] = []  # Degrades the network rule may still hold
        applying: list[asyncio.Future[None]] = []
        unsent = 0
        settled = False
        # None: a history from before VERDICTS_BOUNDED, which applied every verdict at once.
        bound = asyncio.Semaphore(VERDICTS_AT_ONCE) if workflow.patched(VERDICTS_BOUNDED) else None

        async def bounded(
            slots: asyncio.Semaphore, target: ProbeTarget, wanted: ProbeVerdict
        ) -> None:
            # The semaphore wakes its waiters first in, first out: verdicts are applied in the
            # order they were reached, the same on every replay.
            async with slots:
                await apply_verdict(target, wanted, report)

        def apply(target: ProbeTarget, wanted: ProbeVerdict) -> None:
            step = (
                apply_verdict(target, wanted, report)
                if bound is None
                else bounded(bound, target, wanted)
            )
            applying.append(asyncio.ensure_future(step))

        def landed(i: int, result: ProbeResult | None) -> None:
            nonlocal settled, unsent
            target = out.pop(i)
            if result is not None:
                report.ok += result.outcome is ProbeOutcome.OK
                report.failed += result.outcome is ProbeOutcome.FAILED
                asked = verdict(target.state, result.outcome)
                not_run = credentials_unresolved(result)
                unsent += not_run
                if not not_run:
                    judged.append((target, result))
                if asked is ProbeVerdict.RECOVER:
                    apply(target, asked)
                elif asked is ProbeVerdict.DEGRADE and (
                    not_run or answered_busy(result) or result.replayed
                ):
                    report.held.append(f"{target.tenant_id}/{target.deployment_id}")
                elif asked is ProbeVerdict.DEGRADE:
                    waiting.append(target)
            settled = settled or not own_network_possible(judged, list(out.values()))
            if settled:
                for due in waiting:
                    apply(due, ProbeVerdict.DEGRADE)
                waiting.clear()

        try:
            results = await probe_all(targets, window, data, slots, landed)
            report.unprobed = sum(r is None for r in results)
            # Not settled before the last probe (or the deadline): the whole run judges them.
            hold = own_network_suspected(judged)
            for target in waiting:
                if hold:
                    report.held.append(f"{target.tenant_id}/{target.deployment_id}")
                else:
                    apply(target, ProbeVerdict.DEGRADE)
            if hold:
                workflow.logger.warning(
                    "%d of %d probes could not reach their deployment, on several providers: "
                    "taken for this worker's own network, %d Degrade verdicts held",
                    report.failed - unsent,
                    len(judged),
                    len(waiting),
                )
            if unsent:
                workflow.logger.warning(
                    "%d probes not sent: their credentials did not resolve in this worker "
                    "(see the probe activity's log); their deployments keep their state",
                    unsent,
                )
            await asyncio.gather(*applying)
        finally:
            # The run cancelled (or failed): no verdict outlives it.
            for task in applying:
                if not task.done():
                    task.cancel()

    async def _judge_each(
        self,
        targets: list[ProbeTarget],
        window: datetime,
        data: HealthProbeInput,
        slots: asyncio.Semaphore,
        report: HealthProbeReport,
    ) -> None:
        """As runs started before VERDICTS_TOGETHER judged: each probe's verdict at once."""

        async def one(target: ProbeTarget) -> None:
            async with slots:
                result = await probe(target, window, data)
            if result is None:
                return
            if result.outcome is ProbeOutcome.OK:
                report.ok += 1
            else:
                report.failed += 1
            wanted = verdict(target.state, result.outcome)
            if wanted is ProbeVerdict.NONE:
                return
            applied: ApplyVerdictResult = await workflow.execute_activity(
                "probe_apply_verdict",
                ApplyVerdictInput(
                    tenant_id=target.tenant_id,
                    deployment_id=target.deployment_id,
                    verdict=wanted,
                ),
                result_type=ApplyVerdictResult,
                start_to_close_timeout=timedelta(seconds=40),
                retry_policy=STORE_RETRY,
            )
            if applied.applied:
                moved = report.degraded if wanted is ProbeVerdict.DEGRADE else report.recovered
                moved.append(f"{target.tenant_id}/{target.deployment_id}")

        await asyncio.gather(*(one(t) for t in targets))
