"""The one client of the per-deployment lifecycle workflow: register a deployment, or send it a
transition, by name (`activities/lifecycle_types.py`), never by importing the workflow module.

Its callers are the API (`api/lifecycle.py`, REST and console), the health probe, breaker
recovery and the evaluation. They differ only in what a refusal means at their edge (a 409, a
verdict not applied, a log line, a run that cannot complete), so the client has one error
policy: Temporal's errors come out as the three exceptions below, and each caller maps those.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from temporalio.client import Client, WithStartWorkflowOperation, WorkflowUpdateFailedError
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ActivityError, ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from activities.lifecycle_types import (
    ILLEGAL,
    REFUSED,
    REGISTER_UPDATE,
    UPDATE_OF,
    WORKFLOW_NAME,
    LifecycleInput,
    RegisterCandidateResult,
    RegisterRequest,
    workflow_id,
)
from domain.deployments import DeploymentRecord, DeploymentRegistration
from domain.enums import DeploymentState
from domain.lifecycle import Transition


class LifecycleRefused(Exception):
    """The workflow refused the update: an illegal transition (`illegal`, with the state it is
    in), an approval refused (`refusals`, as the workflow words them), or another failure."""

    def __init__(self, kind: str | None, message: str, details: Sequence[Any]) -> None:
        super().__init__(message)
        self.kind, self.message = kind, message
        self.state: str | None = details[0] if kind == ILLEGAL and details else None
        self.refusals: list[dict[str, Any]] = (
            list(details[0]) if kind == REFUSED and details else []
        )

    @property
    def illegal(self) -> bool:
        return self.kind == ILLEGAL


class LifecycleClosed(Exception):
    """No lifecycle workflow runs under this id: never registered, or retired (for a
    registration: the id belonged to a deployment that was retired)."""


class LifecycleTimeout(Exception):
    """The worker did not answer within the caller's bound."""


# Where a lifecycle workflow runs, and the deployment as the store holds it (None: no such).
Resume = tuple[str, Callable[[], Awaitable[DeploymentRecord | None]]]


class LifecycleClient:
    def __init__(self, client: Client, *, timeout: float | None = None) -> None:
        self._client = client
        self._timeout = timeout

    async def register(
        self,
        task_queue: str,
        tenant_id: str,
        idempotency_key: str,
        registration: DeploymentRegistration,
    ) -> RegisterCandidateResult:
        """Start (or attach to) the deployment's workflow and send it `register`."""
        start: WithStartWorkflowOperation[Any, Any] = WithStartWorkflowOperation(
            WORKFLOW_NAME,
            LifecycleInput(
                tenant_id=tenant_id,
                deployment_id=registration.deployment_id,
                registration=registration,
                idempotency_key=idempotency_key,
            ),
            id=workflow_id(tenant_id, registration.deployment_id),
            task_queue=task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            # A retired deployment's workflow has closed; its id is not reused for a new one.
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
            result_type=DeploymentRecord,
        )
        try:
            result: RegisterCandidateResult = await self._bounded(
                self._client.execute_update_with_start_workflow(
                    REGISTER_UPDATE,
                    RegisterRequest(idempotency_key=idempotency_key),
                    start_workflow_operation=start,
                    result_type=RegisterCandidateResult,
                )
            )
        except WorkflowAlreadyStartedError:
            # What the SDK makes of ALREADY_EXISTS for an update-with-start: the id's workflow
            # closed (retired) and may not be reused. Uncaught, the caller got a 500.
            raise LifecycleClosed(registration.deployment_id) from None
        except RPCError as exc:
            if exc.status is RPCStatusCode.ALREADY_EXISTS:
                raise LifecycleClosed(registration.deployment_id) from None
            raise
        return result

    async def transition(
        self,
        tenant_id: str,
        deployment_id: str,
        transition: Transition,
        arg: Any = None,
        *,
        resume: Resume | None = None,
        update_id: str | None = None,
    ) -> DeploymentRecord:
        """Send one transition; the workflow validates it before it enters history. With
        `resume` (the lifecycle's task queue, and a read of the deployment as the store holds
        it), a deployment whose workflow is gone though it is not Retired has it started again
        from that record, and the transition is sent to it: a workflow terminated by hand, or
        a Temporal cluster restored without its histories, left the deployment in its state for
        good, approvals, retirements and health verdicts all refused. `update_id` makes a
        resend of the same transition the same update: Temporal applies it once."""
        try:
            return await self._transition(tenant_id, deployment_id, transition, arg, update_id)
        except LifecycleClosed:
            if resume is None:
                raise
            task_queue, read = resume
            record = await read()
            if record is None or record.state is DeploymentState.RETIRED:
                raise
            await self._restart(task_queue, record)
            return await self._transition(tenant_id, deployment_id, transition, arg, update_id)

    async def _restart(self, task_queue: str, record: DeploymentRecord) -> None:
        try:
            await self._bounded(
                self._client.start_workflow(
                    WORKFLOW_NAME,
                    LifecycleInput(
                        tenant_id=record.tenant_id,
                        deployment_id=record.deployment_id,
                        record=record,
                    ),
                    id=workflow_id(record.tenant_id, record.deployment_id),
                    task_queue=task_queue,
                    # Only over a run that did not complete (terminated, failed, timed out) or
                    # none at all: a retired deployment's run completed, and a caller that read
                    # the row before another retired it must not start one again from it.
                    id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE_FAILED_ONLY,
                    id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                )
            )
        except WorkflowAlreadyStartedError:
            pass  # started again meanwhile, by another caller

    async def _transition(
        self,
        tenant_id: str,
        deployment_id: str,
        transition: Transition,
        arg: Any = None,
        update_id: str | None = None,
    ) -> DeploymentRecord:
        handle = self._client.get_workflow_handle(workflow_id(tenant_id, deployment_id))
        try:
            record: DeploymentRecord = await self._bounded(
                handle.execute_update(
                    UPDATE_OF[transition],
                    args=[] if arg is None else [arg],
                    id=update_id,
                    result_type=DeploymentRecord,
                )
            )
        except WorkflowUpdateFailedError as exc:
            cause = exc.cause
            # A store activity's refusal (a conflict, the row gone) reaches the update wrapped
            # in the activity's failure: its type is the cause's.
            while isinstance(cause, ActivityError) and cause.cause is not None:
                cause = cause.cause
            if isinstance(cause, ApplicationError):
                raise LifecycleRefused(cause.type, cause.message, cause.details) from None
            raise LifecycleRefused(None, str(cause), ()) from None
        except RPCError as exc:
            if exc.status is RPCStatusCode.NOT_FOUND:
                raise LifecycleClosed(deployment_id) from None
            raise
        return record

    async def _bounded(self, call: Any) -> Any:
        if self._timeout is None:
            return await call
        try:
            return await asyncio.wait_for(call, self._timeout)
        except TimeoutError:
            raise LifecycleTimeout() from None
