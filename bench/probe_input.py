"""The InvocationInput of a benchmark probe: an invocation on one target with its own key and
request hash, for the probes that start InvokeModel without the API (bench/invoke_probes.py,
bench/invoke_ceiling.py)."""

from __future__ import annotations

import secrets
import uuid

from bench.invoke_config import PROFILE, TENANT
from domain.hashing import request_hash
from domain.invocation import InvocationInput, Target


def probe_input(i: int, target: Target, queue: str) -> InvocationInput:
    key = f"bench-probe-{uuid.uuid4().hex[:12]}-{i}"
    return InvocationInput(
        invocation_id=uuid.uuid4(),
        tenant_id=TENANT,
        project_id="default",
        profile_id=PROFILE,
        policy_decision_id=uuid.uuid4(),
        idempotency_key=key,
        request_hash=request_hash({"i": i, "k": key}),
        targets=[target],
        pricing_revision="bench-2026",
        caller_token=secrets.token_urlsafe(16),
        caller_queue=queue,
        timeout_seconds=120,
    )
