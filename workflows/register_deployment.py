"""RegisterDeployment: writes a Candidate deployment (and its event) through an activity."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from activities.deployments import RegisterCandidateInput, RegisterCandidateResult
    from domain.deployments import DeploymentRegistration

REGISTER_CANDIDATE = "register_candidate"


@workflow.defn(name="RegisterDeployment")
class RegisterDeploymentWorkflow:
    @workflow.run
    async def run(
        self, tenant_id: str, registration: DeploymentRegistration
    ) -> RegisterCandidateResult:
        return await workflow.execute_activity(
            REGISTER_CANDIDATE,
            RegisterCandidateInput(tenant_id=tenant_id, registration=registration),
            result_type=RegisterCandidateResult,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=RetryPolicy(
                initial_interval=timedelta(milliseconds=200),
                maximum_interval=timedelta(seconds=5),
                maximum_attempts=10,
            ),
        )
