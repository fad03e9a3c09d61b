"""A key whose receipt holds another request's hash is refused as every other reuse of a key
is: a 409 of type `idempotency-key-reused` naming the header. Met in the replay itself (two
requests of different bodies racing on one key: the loser waits for the winner's receipt and
reads it), the refusal carried no type, so a client matching on it missed it."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from api.problems import Problem
from api.replays import Replays
from domain.enums import InvocationOutcome, UsageStatus
from store.tables import InvocationReceiptRow


async def test_a_receipt_of_another_request_is_refused_as_a_reused_key() -> None:
    now = datetime.now(UTC)
    receipt = InvocationReceiptRow(
        invocation_id=uuid.uuid4(),
        tenant_id="t",
        project_id="p",
        profile_id="chat",
        deployment_id="d",
        request_hash="the-first-request",
        idempotency_key="k",
        policy_decision_id=uuid.uuid4(),
        outcome=InvocationOutcome.COMPLETED,
        usage_status=UsageStatus.REPORTED,
        pricing_revision="r1",
        started_at=now,
        ended_at=now,
    )
    # Closed and handed over: the hash is compared before anything is read.
    nothing: Any = None
    replays = Replays(nothing, nothing, nothing, 0.0)
    with pytest.raises(Problem) as refused:
        async for _ in replays.events("t", "k", "another-request", receipt):
            pass
    problem = refused.value
    assert problem.status == 409
    assert problem.type.endswith("/idempotency-key-reused"), problem.type
    assert problem.extensions["field"] == "header.Idempotency-Key"
