"""InvokeModel runs without the workflow sandbox (activities/invoke_setup.py says why): its
real histories must replay deterministically, unsandboxed as it runs and sandboxed alike."""

from __future__ import annotations

import uuid

import httpx
import pytest
from temporalio.client import Client, WorkflowExecution
from temporalio.worker import Replayer, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from activities.invoke_setup import INVOKE_WORKFLOW_RUNNER
from core import tracing
from core.payload_converter import data_converter
from providers.upstream import Fault, FaultKind, UpstreamServer
from tests.conftest import TokenFactory
from tests.helpers.catalog import approved_profile
from tests.helpers.deadline import eventually
from workflows.invoke import InvokeModelWorkflow

MODEL = "replay-sim"


@pytest.fixture
async def auth(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
) -> dict[str, str]:
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    deployment = {"model": MODEL, "endpointRef": upstream.endpoint_ref}
    await approved_profile(http, auth, temporal_client, tenant, "replayed", {"rp/a": deployment})
    return auth


@pytest.mark.parametrize(
    "runner", [INVOKE_WORKFLOW_RUNNER, SandboxedWorkflowRunner()], ids=["as-run", "sandboxed"]
)
async def test_invoke_histories_replay(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
    runner: WorkflowRunner,
) -> None:
    for stream in (False, True):
        ok = await http.post(
            "/v1/chat/completions",
            json={
                "model": "replayed",
                "stream": stream,
                "messages": [{"role": "user", "content": "hi"}],
            },
            headers={**auth, "Idempotency-Key": uuid.uuid4().hex},
        )
        assert ok.status_code == 200
    upstream.inject(MODEL, Fault(kind=FaultKind.CONTENT_POLICY, times=1))
    refused = await http.post(
        "/v1/chat/completions",
        json={"model": "replayed", "messages": [{"role": "user", "content": "hi"}]},
        headers={**auth, "Idempotency-Key": uuid.uuid4().hex},
    )
    assert refused.status_code == 400
    # Visibility is eventually consistent: a workflow closed a moment ago may not be listed yet.
    query = (
        f"WorkflowType = 'InvokeModel' AND WorkflowId STARTS_WITH 'invoke/{tenant}/' "
        "AND ExecutionStatus = 'Completed'"
    )

    async def closed() -> list[WorkflowExecution] | None:
        found = [wf async for wf in temporal_client.list_workflows(query)]
        return found if len(found) == 3 else None

    histories = [
        await temporal_client.get_workflow_handle(wf.id, run_id=wf.run_id).fetch_history()
        for wf in await eventually(closed)
    ]
    replayer = Replayer(
        workflows=[InvokeModelWorkflow],
        workflow_runner=runner,
        data_converter=data_converter,
        interceptors=tracing.interceptors(),
    )
    for history in histories:
        await replayer.replay_workflow(history)  # raises on any nondeterminism
