"""An evaluation whose case fails stops the cases still waiting for their turn (patch
evaluation-cases-stop-on-failure), and the histories of runs from before it replay on the
workflow as it is (see tests/test_workflow_histories.py for why histories are kept).

The histories were recorded on 2c5937b with stub activities, six cases two at a time: one run
in which every case completes and the record is written; one in which the first case fails
(CannotRun) while the second is under way, and the third is scheduled beside the failure's
record, as the workflow did then."""

from __future__ import annotations

import asyncio
import sys
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio import activity
from temporalio.client import WorkflowHistory
from temporalio.exceptions import ApplicationError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, Worker

from activities.evaluation_types import CaseInput, EvaluationInput, FailInput, Prepared
from core.payload_converter import data_converter
from domain.invocation import Target
from domain.suite import CaseResult
from tests.helpers.deadline import eventually
from workflows.evaluate import EvaluateDeploymentWorkflow

HISTORIES = Path(__file__).parent / "histories"
CASES = [f"tool-calling/case-{i}" for i in range(6)]


@pytest.mark.parametrize(
    "recorded",
    [
        "evaluate_deployment_before_cases_stop_completed.json",
        "evaluate_deployment_before_cases_stop.json",
    ],
)
async def test_runs_from_before_replay(recorded: str) -> None:
    history = WorkflowHistory.from_json(f"recorded/{recorded}", (HISTORIES / recorded).read_text())
    replayer = Replayer(workflows=[EvaluateDeploymentWorkflow], data_converter=data_converter)
    await replayer.replay_workflow(history)


async def test_a_failed_case_stops_the_cases_still_waiting() -> None:
    """A case that fails ends the evaluation: the cases waiting for their turn went on being
    sent to the provider (paid for) while the run failed, their answers thrown away.
    Time-skipping, stub activities: two cases at a time, the first failing while the second
    is under way."""
    sent: list[str] = []
    failed: list[str] = []
    held = asyncio.Event()

    @activity.defn(name="evaluation_prepare")
    async def prepare(data: EvaluationInput) -> Prepared:
        target = Target(
            deployment_id=data.deployment_id, provider="openai", model="m", endpoint_ref="env:K"
        )
        return Prepared(
            target=target, context_tokens=8192, suite_version="v", case_ids=CASES,
            capability_of=dict.fromkeys(CASES, "tool-calling"),
        )  # fmt: skip

    @activity.defn(name="evaluation_run_case")
    async def run_case(data: CaseInput) -> CaseResult:
        sent.append(data.case_id)
        if data.case_id == CASES[0]:
            await eventually(lambda: CASES[1] in sent, timeout=30, interval=0.01)
            raise ApplicationError("provider refused", type="CannotRun", non_retryable=True)
        await held.wait()  # under way until the worker stops
        raise AssertionError("never answered")

    @activity.defn(name="evaluation_fail")
    async def fail(data: FailInput) -> None:
        failed.append(data.reason)

    test_server = Path(sys.executable).parent / "temporal-test-server"
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=data_converter,
        test_server_existing_path=str(test_server),
        test_server_startup_timeout=timedelta(seconds=60),
    )
    queue = f"eval-stop-{uuid.uuid4().hex[:8]}"
    async with (
        env,
        Worker(
            env.client,
            task_queue=queue,
            workflows=[EvaluateDeploymentWorkflow],
            activities=[prepare, run_case, fail],
        ),
    ):
        ref = await env.client.execute_workflow(
            EvaluateDeploymentWorkflow.run,
            EvaluationInput(evaluation_id="e-1", tenant_id="t", deployment_id="d/1", concurrency=2),
            id=queue,
            task_queue=queue,
            execution_timeout=timedelta(hours=1),
        )
        scheduled = [
            e.activity_task_scheduled_event_attributes.activity_type.name
            async for e in env.client.get_workflow_handle(queue).fetch_history_events()
            if e.HasField("activity_task_scheduled_event_attributes")
        ]
    assert ref is None and len(failed) == 1 and "provider refused" in failed[0], failed
    # The two under way when the first failed, and nothing after it.
    assert scheduled.count("evaluation_run_case") == 2, scheduled
    assert sorted(sent) == sorted(CASES[:2])
