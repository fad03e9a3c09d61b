"""Recording an evaluation outlasts a database restart. The record activity imports the evidence
(the deployment becomes Evaluated) and then stores the summary; with five attempts, a store away
for half a minute after the import marked the evaluation Failed beside a deployment Evaluated
on its evidence. Time-skipping: the backoff passes in workflow time."""

from __future__ import annotations

import sys
import uuid
from datetime import timedelta
from pathlib import Path

from temporalio import activity
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from activities.evaluation_types import CaseInput, EvaluationInput, FailInput, Prepared, RecordInput
from core.payload_converter import data_converter
from domain.invocation import Target
from domain.suite import CaseResult
from workflows.evaluate import EvaluateDeploymentWorkflow

RESTART = 12  # failed attempts: about two and a half minutes of backoff


async def test_recording_is_retried_while_the_store_restarts() -> None:
    tried: list[int] = []
    failed: list[str] = []

    @activity.defn(name="evaluation_prepare")
    async def prepare(data: EvaluationInput) -> Prepared:
        target = Target(
            deployment_id=data.deployment_id, provider="openai", model="m", endpoint_ref="env:K"
        )
        return Prepared(
            target=target, context_tokens=8192, suite_version="v", case_ids=[], capability_of={}
        )

    @activity.defn(name="evaluation_run_case")
    async def run_case(data: CaseInput) -> CaseResult:
        raise AssertionError("no cases here")

    @activity.defn(name="evaluation_record")
    async def record(data: RecordInput) -> str:
        tried.append(activity.info().attempt)
        if len(tried) <= RESTART:
            raise ConnectionRefusedError("the store is restarting")
        return "evidence-ref"

    @activity.defn(name="evaluation_fail")
    async def fail(data: FailInput) -> None:
        failed.append(data.reason)

    test_server = Path(sys.executable).parent / "temporal-test-server"
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=data_converter,
        test_server_existing_path=str(test_server),
        test_server_startup_timeout=timedelta(seconds=60),
    )
    queue = f"eval-record-{uuid.uuid4().hex[:8]}"
    async with (
        env,
        Worker(
            env.client,
            task_queue=queue,
            workflows=[EvaluateDeploymentWorkflow],
            activities=[prepare, run_case, record, fail],
        ),
    ):
        ref = await env.client.execute_workflow(
            EvaluateDeploymentWorkflow.run,
            EvaluationInput(evaluation_id="e-1", tenant_id="t", deployment_id="d/1", concurrency=1),
            id=queue,
            task_queue=queue,
            execution_timeout=timedelta(hours=2),
        )
    assert (ref, failed) == ("evidence-ref", [])
    assert len(tried) == RESTART + 1
