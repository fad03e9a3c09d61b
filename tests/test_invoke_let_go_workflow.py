"""The workflow's side of a call let go of: its local activity failed as cancelled while the
workflow itself was not (the SDK evicted the run as the activity ran, and a next execution was
handed the cancellation of the one still finishing). The call then waits in its process's hub
(activities/invoke_cancel.py), so the workflow adopts it on the caller queue; closing its
receipt as abandoned closed it Failed beside the answer the call was still giving. Stand-in
activities on a real Temporal: the local one fails with a CancelledError, which the SDK hands
the workflow as a failure (an eviction's cancellation resolves as cancelled instead; the
workflow takes both, and its own cancellation, told by workflow.cancellation_reason(), for
neither: tests/test_fault_temporal_eviction.py)."""

from __future__ import annotations

import uuid

from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import CancelledError
from temporalio.worker import Worker

from activities.invoke_setup import INVOKE_WORKFLOW_RUNNER
from domain.enums import InvocationOutcome
from domain.invocation import Disposition, InvocationInput, InvocationSummary
from tests.helpers.invocations import invocation_input
from workflows.invoke import InvokeModelWorkflow


class StandIns:
    def __init__(self) -> None:
        self.abandoned: list[uuid.UUID] = []

    @activity.defn(name="call_provider")
    async def call_provider(self, data: InvocationInput) -> InvocationSummary:
        if activity.info().is_local:
            raise CancelledError("the run was evicted as this ran")
        return InvocationSummary(
            invocation_id=data.invocation_id, outcome=InvocationOutcome.COMPLETED
        )

    @activity.defn(name="close_abandoned_receipt")
    async def close_abandoned(self, data: InvocationInput) -> InvocationSummary:
        self.abandoned.append(data.invocation_id)
        return InvocationSummary(invocation_id=data.invocation_id, outcome=InvocationOutcome.FAILED)


async def test_a_local_activity_cancelled_without_its_workflow_is_adopted_on_the_caller_queue(
    temporal_client: Client, tenant: str
) -> None:
    queue = f"let-go-{uuid.uuid4().hex[:8]}"
    stand_ins = StandIns()
    data = invocation_input(tenant).model_copy(update={"caller_queue": queue})
    async with Worker(
        temporal_client,
        task_queue=queue,
        workflows=[InvokeModelWorkflow],
        workflow_runner=INVOKE_WORKFLOW_RUNNER,
        activities=[stand_ins.call_provider, stand_ins.close_abandoned],
    ):
        summary = await temporal_client.execute_workflow(
            InvokeModelWorkflow.run, data, id=f"let-go/{uuid.uuid4()}", task_queue=queue
        )
    assert (summary.outcome, summary.disposition) == (
        InvocationOutcome.COMPLETED,
        Disposition.DONE,
    )
    assert stand_ins.abandoned == []
