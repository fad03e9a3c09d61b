"""DeploymentLifecycle: one long-lived workflow per deployment owning its state machine.

Transitions arrive as updates. A validator refuses an illegal transition before anything is
recorded in history; the handler (serialised by a lock) re-checks, then has an activity write the
projection row and its events. History stays bounded through continue-as-new.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from pydantic import ValidationError

    from activities.lifecycle_types import (
        CONFLICT,
        ILLEGAL,
        REFUSED,
        STORE_REFUSALS,
        WORKFLOW_NAME,
        ApprovalCheckInput,
        ApproveRequest,
        EvidenceInput,
        LifecycleInput,
        RegisterCandidateInput,
        RegisterCandidateResult,
        RegisterRequest,
        TransitionInput,
    )
    from domain.approval import Refusal
    from domain.deployments import DeploymentRecord, LicenseMetadata
    from domain.enums import DeploymentState
    from domain.lifecycle import IllegalTransition, Transition, is_noop, next_state
    from domain.stored import stored_context

T = TypeVar("T")

_STORE_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200),
    maximum_interval=timedelta(seconds=10),
    # An illegal transition and a record that does not read fail the same way every time:
    # retried, the update held the deployment's lock for ever.
    non_retryable_error_types=list(STORE_REFUSALS),
)


async def _store(activity: str, arg: object, result_type: type[T]) -> T:
    """Store activities are short transactions: a lost worker is noticed within seconds."""
    result: T = await workflow.execute_activity(
        activity,
        arg,
        result_type=result_type,
        start_to_close_timeout=timedelta(seconds=10),
        retry_policy=_STORE_RETRY,
    )
    return result


# The update handlers' names are `lifecycle_types.UPDATE_OF`'s values (checked by
# tests/test_lifecycle_client.py), so callers never need this module.
@workflow.defn(name=WORKFLOW_NAME)
class DeploymentLifecycleWorkflow:
    def __init__(self) -> None:
        self._record: DeploymentRecord | None = None
        self._created_by_key: str | None = None
        self._lock = asyncio.Lock()
        self._transitions = 0
        self._input: LifecycleInput | None = None

    @workflow.run
    async def run(self, data: LifecycleInput) -> DeploymentRecord:
        self._input = data
        if data.record is not None:
            self._record, self._created_by_key = data.record, data.created_by_key
        else:
            assert data.registration is not None
            result: RegisterCandidateResult = await _store(
                "register_candidate",
                RegisterCandidateInput(tenant_id=data.tenant_id, registration=data.registration),
                RegisterCandidateResult,
            )
            self._record = result.deployment
            self._created_by_key = data.idempotency_key if result.created else None
        await workflow.wait_condition(
            lambda: (
                self._retired()
                or self._transitions >= data.max_transitions_per_run
                or workflow.info().is_continue_as_new_suggested()
            )
        )
        await workflow.wait_condition(workflow.all_handlers_finished)
        assert self._record is not None
        if self._retired():
            return self._record
        workflow.continue_as_new(
            data.model_copy(
                update={
                    "registration": None,
                    "idempotency_key": None,
                    "record": self._record,
                    "created_by_key": self._created_by_key,
                }
            )
        )

    def _retired(self) -> bool:
        return self._record is not None and self._record.state is DeploymentState.RETIRED

    # -- queries and updates -------------------------------------------------------------
    @workflow.query
    def current(self) -> DeploymentRecord | None:
        return self._record

    @workflow.update
    async def register(self, request: RegisterRequest) -> RegisterCandidateResult:
        await workflow.wait_condition(lambda: self._record is not None)
        assert self._record is not None
        return RegisterCandidateResult(
            created=request.idempotency_key == self._created_by_key, deployment=self._record
        )

    @workflow.update
    async def approve(self, request: ApproveRequest) -> DeploymentRecord:
        async with self._lock:
            record = await self._ready(Transition.APPROVE)
            again = is_noop(record.state, Transition.APPROVE)
            if again and not workflow.patched("approve-again-answers"):
                # A history from before approving again was answered: refused here, as then.
                raise ApplicationError(
                    str(IllegalTransition(record.state, Transition.APPROVE)),
                    record.state.value,
                    type=ILLEGAL,
                    non_retryable=True,
                )
            refusals: list[Refusal] = await _store(
                "check_approval",
                ApprovalCheckInput(
                    tenant_id=record.tenant_id,
                    deployment_id=record.deployment_id,
                    intended_use=request.intended_use,
                ),
                list[Refusal],
            )
            if refusals:
                raise ApplicationError(
                    "approval refused",
                    [r.model_dump(by_alias=True, exclude_none=True) for r in refusals],
                    type=REFUSED,
                    non_retryable=True,
                )
            if again:
                return record
            return await self._apply(record, Transition.APPROVE)

    @workflow.update
    async def record_evidence(self, evidence: EvidenceInput) -> DeploymentRecord:
        async with self._lock:
            record = await self._ready(Transition.RECORD_EVIDENCE)
            # The importer is idempotent on the evidence reference: a retry records nothing new.
            if record.capability_evidence_ref == evidence.evidence_ref:
                return record
            return await self._apply(record, Transition.RECORD_EVIDENCE, evidence=evidence)

    @workflow.update
    async def record_license(self, license_: LicenseMetadata) -> DeploymentRecord:
        async with self._lock:
            record = await self._ready(Transition.RECORD_LICENSE)
            return await self._apply(record, Transition.RECORD_LICENSE, license_=license_)

    @workflow.update
    async def probe_failed(self) -> DeploymentRecord:
        return await self._simple(Transition.PROBE_FAILED)

    @workflow.update
    async def probe_recovered(self) -> DeploymentRecord:
        return await self._simple(Transition.PROBE_RECOVERED)

    @workflow.update
    async def retire(self) -> DeploymentRecord:
        return await self._simple(Transition.RETIRE)

    @approve.validator
    def _validate_approve(self, request: ApproveRequest) -> None:
        self._check(Transition.APPROVE)

    @record_evidence.validator
    def _validate_evidence(self, evidence: EvidenceInput) -> None:
        self._check(Transition.RECORD_EVIDENCE)

    @record_license.validator
    def _validate_license(self, license_: LicenseMetadata) -> None:
        self._check(Transition.RECORD_LICENSE)

    @probe_failed.validator
    def _validate_probe_failed(self) -> None:
        self._check(Transition.PROBE_FAILED)

    @probe_recovered.validator
    def _validate_probe_recovered(self) -> None:
        self._check(Transition.PROBE_RECOVERED)

    @retire.validator
    def _validate_retire(self) -> None:
        self._check(Transition.RETIRE)

    # -- helpers ---------------------------------------------------------------------------
    def _check(self, transition: Transition) -> None:
        if self._record is None:
            return  # still registering; the handler waits for it and checks again
        try:
            next_state(self._record.state, transition)
        except IllegalTransition as exc:
            raise ApplicationError(
                str(exc), self._record.state.value, type=ILLEGAL, non_retryable=True
            ) from None

    async def _ready(self, transition: Transition) -> DeploymentRecord:
        await workflow.wait_condition(lambda: self._record is not None)
        self._check(transition)
        assert self._record is not None
        return self._record

    async def _simple(self, transition: Transition) -> DeploymentRecord:
        async with self._lock:
            record = await self._ready(transition)
            if is_noop(record.state, transition):
                return record
            return await self._apply(record, transition)

    async def _apply(
        self,
        record: DeploymentRecord,
        transition: Transition,
        *,
        evidence: EvidenceInput | None = None,
        license_: LicenseMetadata | None = None,
    ) -> DeploymentRecord:
        try:
            updated: DeploymentRecord = await _store(
                "apply_transition",
                TransitionInput(
                    tenant_id=record.tenant_id,
                    deployment_id=record.deployment_id,
                    transition=transition,
                    expected_version=record.version,
                    expected_state=record.state,
                    evidence=evidence,
                    license=license_,
                ),
                DeploymentRecord,
            )
        except ActivityError as exc:
            self._adopt(exc)
            raise
        self._record = updated
        self._transitions += 1
        return updated

    def _adopt(self, failure: ActivityError) -> None:
        """A conflict's row as the store holds it becomes the workflow's copy, and the next
        transition is judged against it. Kept, the copy stayed behind the store for good: the
        next transition found the row one version on and took it for its own (a Retire answered
        with the Approved row, nothing retired), or was a no-op from the state the copy held (a
        Degraded row held Approved: every recovery a no-op)."""
        cause = failure.cause
        if not (isinstance(cause, ApplicationError) and cause.type == CONFLICT and cause.details):
            return
        # A history from before conflicts were adopted kept its copy: replayed, it keeps it.
        if workflow.patched("conflict-adopts-stored"):
            try:
                self._record = DeploymentRecord.model_validate(
                    cause.details[0], context=stored_context()
                )
            except ValidationError:
                # Raised in workflow code it would fail the task for ever: the copy stays.
                workflow.logger.warning("a conflict's stored deployment did not read")
