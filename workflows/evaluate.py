"""EvaluateDeployment: run the capability suite against one deployment through its real
adapter, cases as activities with bounded concurrency and retries on transient provider errors,
then import the evidence (Candidate → Evaluated). A reranker runs the rerank check instead
(`domain.suite.rerank`), an embedding model the embedding check (`domain.suite.embedding`).
If the suite cannot run, the deployment stays as it was and the evaluation says why; the
cases not yet sent then never are."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.evaluation_types import (
        TEMPERATURE_REFUSED,
        CaseInput,
        EvaluationInput,
        FailInput,
        Prepared,
        Progress,
        RecordInput,
        RerankInput,
        RerankRecordInput,
    )
    from domain.suite import CaseResult
    from domain.suite.checks import CheckResult

CASE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=10),
    maximum_attempts=4,
    non_retryable_error_types=["CannotRun"],
)

# Recording imports the evidence through the lifecycle (idempotent) and then stores the
# evaluation's summary: retried while the store is away, up to 30 minutes in all. With five
# attempts (15 s of backoff) a database restart of half a minute after the import marked the
# evaluation Failed beside a deployment Evaluated on its evidence, the summary never stored.
RECORD_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    non_retryable_error_types=["CannotRun"],
)
RECORD_IN_ALL = timedelta(minutes=30)

# Preparing reads the deployment and its listing profiles: retried while the store is away,
# up to five minutes in all (no case has been paid for yet: evaluating again costs nothing).
# With Temporal's default policy, unbounded, a failure that was not CannotRun (a provider with
# no adapter raised the adapter's error) was retried for good: the evaluation stayed Running,
# and every later one of the deployment was a 409.
PREPARE_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    non_retryable_error_types=["CannotRun"],
)
PREPARE_IN_ALL = timedelta(minutes=5)
# Histories from before PREPARE_RETRY schedule the prepare activity with the default policy.
PREPARE_RETRY_PATCH = "evaluation-prepare-bounded-retry"
# Histories from before a failed case stopped the others: the cases waiting for their turn went
# on being sent (and paid for) while the run was failing, their answers thrown away.
CASES_STOP_PATCH = "evaluation-cases-stop-on-failure"


def _reason(exc: ActivityError) -> str:
    cause = exc.cause
    while isinstance(cause, ApplicationError | ActivityError) and cause.cause is not None:
        cause = cause.cause
    return str(cause) if cause is not None else str(exc)


@workflow.defn(name="EvaluateDeployment")
class EvaluateDeploymentWorkflow:
    def __init__(self) -> None:
        self._status = "Preparing"
        self._capability_of: dict[str, str] = {}
        self._done: Counter[str] = Counter()
        # Whether cases send the suite's temperature: not once the model refused it.
        self._temperature = True

    @workflow.signal(name=TEMPERATURE_REFUSED)
    def temperature_refused(self) -> None:
        self._temperature = False

    @workflow.query
    def progress(self) -> Progress:
        totals = Counter(self._capability_of.values())
        return Progress(
            total=len(self._capability_of),
            done=sum(self._done.values()),
            by_capability={c: [self._done[c], n] for c, n in sorted(totals.items())},
            status=self._status,
        )

    @workflow.run
    async def run(self, data: EvaluationInput) -> str | None:
        quick = timedelta(seconds=30)
        try:
            if workflow.patched(PREPARE_RETRY_PATCH):
                prepared = await workflow.execute_activity(
                    "evaluation_prepare",
                    data,
                    result_type=Prepared,
                    start_to_close_timeout=quick,
                    schedule_to_close_timeout=PREPARE_IN_ALL,
                    retry_policy=PREPARE_RETRY,
                )
            else:
                prepared = await workflow.execute_activity(
                    "evaluation_prepare", data, result_type=Prepared, start_to_close_timeout=quick
                )
        except ActivityError as exc:
            await self._fail(data, _reason(exc))
            return None
        self._capability_of = prepared.capability_of
        self._status = "Running"
        if prepared.kind != "suite":
            return await self._check(data, prepared)
        try:
            results = await self._cases(data, prepared)
        except ActivityError as exc:
            await self._fail(data, _reason(exc))
            return None
        self._status = "Recording"
        try:
            ref: str = await workflow.execute_activity(
                "evaluation_record",
                RecordInput(
                    evaluation_id=data.evaluation_id,
                    tenant_id=data.tenant_id,
                    deployment_id=data.deployment_id,
                    context_tokens=prepared.context_tokens,
                    results=results,
                    suite_version=prepared.suite_version,
                    temperature_refused=not self._temperature,
                ),
                result_type=str,
                start_to_close_timeout=timedelta(minutes=2),
                schedule_to_close_timeout=RECORD_IN_ALL,
                retry_policy=RECORD_RETRY,
            )
        except ActivityError as exc:
            await self._fail(data, _reason(exc))
            return None
        self._status = "Completed"
        return ref

    async def _cases(self, data: EvaluationInput, prepared: Prepared) -> list[CaseResult]:
        """Every case's result, `data.concurrency` at a time. The first case that fails raises
        its failure, the others stopped: those waiting for their turn are never sent, those
        under way are cancelled (a case sends no heartbeat to hear it by: it runs to its
        provider's answer, which no one reads)."""
        stop = workflow.patched(CASES_STOP_PATCH)
        limit = asyncio.Semaphore(data.concurrency)
        failed: list[ActivityError] = []

        async def one(case_id: str) -> CaseResult:
            async with limit:
                if failed:
                    # Set before the failed case let go of its place, so no case waiting for
                    # one is sent after it.
                    raise failed[0]
                try:
                    result: CaseResult = await workflow.execute_activity(
                        "evaluation_run_case",
                        CaseInput(
                            tenant_id=data.tenant_id,
                            target=prepared.target,
                            context_tokens=prepared.context_tokens,
                            case_id=case_id,
                            suite_version=prepared.suite_version,
                            temperature=self._temperature,
                        ),
                        result_type=CaseResult,
                        start_to_close_timeout=timedelta(minutes=5),
                        retry_policy=CASE_RETRY,
                    )
                except ActivityError as exc:
                    if stop:
                        failed.append(exc)
                    raise
            self._done[self._capability_of[case_id]] += 1
            return result

        # Tasks in the cases' order, as gather made them from the coroutines before the patch.
        tasks = [asyncio.ensure_future(one(c)) for c in prepared.case_ids]
        try:
            return list(await asyncio.gather(*tasks))
        except ActivityError:
            if stop:
                for task in tasks:
                    task.cancel()
            raise

    async def _check(self, data: EvaluationInput, prepared: Prepared) -> str | None:
        """A deployment the suite does not apply to: its fixed check's few cases in one
        activity, then its record (steps named for the rerank check, the first of them)."""
        check = "rerank" if prepared.kind == "suite" else prepared.kind
        try:
            results: list[CheckResult] = await workflow.execute_activity(
                "evaluation_rerank",
                RerankInput(tenant_id=data.tenant_id, target=prepared.target, check=check),
                result_type=list[CheckResult],
                start_to_close_timeout=timedelta(minutes=5),
                retry_policy=CASE_RETRY,
            )
            for case_id in prepared.case_ids:
                self._done[self._capability_of[case_id]] += 1
            self._status = "Recording"
            ref: str = await workflow.execute_activity(
                "evaluation_record_rerank",
                RerankRecordInput(
                    evaluation_id=data.evaluation_id,
                    tenant_id=data.tenant_id,
                    deployment_id=data.deployment_id,
                    results=results,
                    check=check,
                ),
                result_type=str,
                start_to_close_timeout=timedelta(minutes=2),
                schedule_to_close_timeout=RECORD_IN_ALL,
                retry_policy=RECORD_RETRY,
            )
        except ActivityError as exc:
            await self._fail(data, _reason(exc))
            return None
        self._status = "Completed"
        return ref

    async def _fail(self, data: EvaluationInput, reason: str) -> None:
        self._status = "Failed"
        await workflow.execute_activity(
            "evaluation_fail",
            FailInput(evaluation_id=data.evaluation_id, tenant_id=data.tenant_id, reason=reason),
            start_to_close_timeout=timedelta(seconds=30),
        )
