"""The worker process registers the workflows and activities and drains on SIGTERM."""

from __future__ import annotations

import os
import sys
import uuid

from temporalio.client import Client

from activities.lifecycle_types import LifecycleInput, RegisterRequest
from core.settings import Settings
from domain.deployments import DeploymentRegistration
from tests.helpers.process import Proc
from workflows.deployment_lifecycle import DeploymentLifecycleWorkflow


async def test_worker_process_serves_registrations_and_drains_on_sigterm(
    settings: Settings, temporal_client: Client
) -> None:
    queue = f"worker-proc-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "MODEL_ROUTER_DATABASE_URL": settings.database_url,
        "MODEL_ROUTER_TEMPORAL_ADDRESS": settings.temporal_address,
        "MODEL_ROUTER_TEMPORAL_TASK_QUEUE": queue,
    }
    proc = Proc([sys.executable, "-c", "import worker; worker.main()"], env=env)
    try:
        proc.wait_for_line("worker polling", timeout=30)
        tenant = f"t-{uuid.uuid4().hex[:8]}"
        registration = DeploymentRegistration.model_validate(
            {
                "deploymentId": "vllm/pool-a/qwen",
                "provider": "vllm",
                "model": "qwen2.5-coder",
                "region": "eu",
                "privacyClass": "Local",
                "endpointRef": "pool:tenant-a/vllm",
            }
        )
        handle = await temporal_client.start_workflow(
            DeploymentLifecycleWorkflow.run,
            LifecycleInput(
                tenant_id=tenant,
                deployment_id="vllm/pool-a/qwen",
                registration=registration,
                idempotency_key="k",
            ),
            id=f"deployment/{tenant}/vllm/pool-a/qwen",
            task_queue=queue,
        )
        result = await handle.execute_update(
            DeploymentLifecycleWorkflow.register, RegisterRequest(idempotency_key="k")
        )
        assert result.created and result.deployment.state == "Candidate"
        retired = await handle.execute_update(DeploymentLifecycleWorkflow.retire)
        assert retired.state == "Retired"
    finally:
        code = proc.stop(timeout=40)
    assert code == 0, proc.output
    assert "worker stopped" in proc.output
