"""An invocation's workflow input and a completed summary, for tests that drive the store's
statements or the invoke activity directly (no HTTP request, no route)."""

from __future__ import annotations

import uuid

from domain.enums import InvocationOutcome, UsageStatus
from domain.invocation import InvocationInput, InvocationSummary, Target, invocation_id


def invocation_input(
    tenant: str,
    key: str | None = None,
    *,
    profile_id: str = "chat",
    target: Target | None = None,
    caller_token: str = "",
) -> InvocationInput:
    key = key or f"test-{uuid.uuid4().hex}"
    return InvocationInput(
        invocation_id=invocation_id(tenant, key),
        tenant_id=tenant,
        project_id="p",
        profile_id=profile_id,
        policy_decision_id=uuid.uuid4(),
        idempotency_key=key,
        request_hash="sha256:x",
        pricing_revision="none",
        caller_token=caller_token,
        caller_queue="q",
        timeout_seconds=30,
        targets=[
            target or Target(deployment_id="sim/a", provider="openai", model="m", endpoint_ref="x")
        ],
    )


def completed(data: InvocationInput) -> InvocationSummary:
    """The summary of a call that completed on the input's first target."""
    return InvocationSummary(
        invocation_id=data.invocation_id,
        outcome=InvocationOutcome.COMPLETED,
        usage_status=UsageStatus.REPORTED,
        deployment_id=data.targets[0].deployment_id,
        input_tokens=3,
        output_tokens=4,
        latency_ms=5,
    )
