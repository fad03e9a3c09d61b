"""What every invoke surface shares (Chat Completions, Messages, Responses, the gateway): the
invocation service, the call headers, the receipt headers, folding an invocation's events into
one answer, replaying a stored answer as events, and the failure a caller is told.

They are defined in `api/routers/openai.py` (the first surface) and named publicly here, so the
new surfaces reuse them rather than copy them; moving the definitions here is left to the
restructuring of the invocation stream (issue 18), which is when the other surfaces' imports
change too, to keep this change clear of the files other work edits."""

from __future__ import annotations

from typing import Any

from api.routers.openai import (
    DEPLOYMENT,
    RECEIPT,
    CallHeaders,
    Headers,
    Service,
)
from api.routers.openai import _collect as collect
from api.routers.openai import _failure as failure_response
from api.routers.openai import _first as first_event
from api.routers.openai import _replay_events as replay_events
from domain.invocation import InvocationSummary

__all__ = [
    "DEPLOYMENT",
    "RECEIPT",
    "USAGE_STATUS",
    "CallHeaders",
    "Headers",
    "Service",
    "collect",
    "failure_response",
    "first_event",
    "no_retry",
    "receipt_headers",
    "receipt_view",
    "replay_events",
]


def no_retry(status: int, problem: dict[str, Any]) -> dict[str, str]:
    """Both SDKs retry 409 (as a lock timeout) and every 5xx unless told otherwise: a reused
    Idempotency-Key or a permanent failure will not change on a retry."""
    if status == 409 or problem.get("errorClass") == "permanent":
        return {"x-should-retry": "false"}
    return {}


# Reported (the provider said), Estimated (our count) or Unknown, as on the receipt.
USAGE_STATUS = "X-Model-Router-Usage-Status"


def receipt_headers(summary: InvocationSummary) -> dict[str, str]:
    """A whole answer's headers, in the receipt's own words: the deployment that answered
    (a fallback's, if one did), never the plan's first guess."""
    headers = {RECEIPT: str(summary.invocation_id), DEPLOYMENT: summary.deployment_id or ""}
    if summary.usage_status is not None:
        headers[USAGE_STATUS] = summary.usage_status.value
    return headers


def receipt_view(summary: InvocationSummary) -> dict[str, Any]:
    """The receipt as a surface shows it beside its own fields (a body's `model_router`, a
    stream's receipt event)."""
    return {
        "receiptId": str(summary.invocation_id),
        "deploymentId": summary.deployment_id,
        "outcome": summary.outcome,
        "usageStatus": summary.usage_status,
        "fallbackUsed": summary.fallback_used,
    }
