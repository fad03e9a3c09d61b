"""The receipt's fields, each declared once: when it gets its value and which surfaces carry
it. Every copy of a receipt is made from this table — the claim's and the close's column values
(`store/receipt_statements.py`), the summary a replay answers with (`summary_of`), the
ModelInvoked event (`model_invoked`, also the reconciler's corrected one) — and the REST view
(`api/receipt_views.py`, the console's too) is checked against it by `tests/test_receipt_fields.py`,
which also fails while a column of `invocation_receipts` is missing here.

Adding a field: declare it below, deciding every surface (no defaults). A field written at the
claim is copied by name from `InvocationInput`, one written at the close by name from
`InvocationSummary`, and one a replay carries back by name into `InvocationSummary` — so the
field needs that name on those models (the test says which is missing).

Values are read from a mapping of column name to value: a Core row's `._mapping`, an ORM
row's `model_dump()`, or the dict the hot path builds (it has written the row itself and does
not read it back)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from enum import Enum, StrEnum
from typing import Any, NamedTuple

from pydantic.alias_generators import to_camel

from domain.amounts import decimal_text
from domain.close_reason import close_reason, replayed_kind
from domain.enums import InvocationOutcome, UsageStatus
from domain.events import TOPICS
from domain.invocation import InvocationInput, InvocationSummary


class Written(StrEnum):
    CLAIM = "claim"  # at the claim: from InvocationInput (or a provisional value, below)
    CLOSE = "close"  # at the close: from InvocationSummary (or derived, below)
    SETTLED = "settled"  # later, by reconciliation only


class Field(NamedTuple):
    written: Written
    replayed: bool  # a replay's InvocationSummary carries it back (summary_of)
    event: bool  # the ModelInvoked payload carries it (the spec's payload: camelCase)
    shown: bool  # the REST receipt view (/factory/runs/…, /gateway/*, the console) shows it


C, X, S = Written.CLAIM, Written.CLOSE, Written.SETTLED
# In the order of the ModelInvoked payload (the spec's) for the fields it carries.
FIELDS: dict[str, Field] = {
    "invocation_id": Field(C, replayed=True, event=True, shown=True),
    "tenant_id": Field(C, replayed=False, event=True, shown=True),
    "project_id": Field(C, replayed=False, event=True, shown=True),
    "run_id": Field(C, replayed=False, event=True, shown=True),
    "attempt_id": Field(C, replayed=False, event=True, shown=True),
    "profile_id": Field(C, replayed=False, event=True, shown=True),
    # Provisional at the claim (the first target); the close names who answered.
    "deployment_id": Field(X, replayed=True, event=True, shown=True),
    "outcome": Field(X, replayed=True, event=True, shown=True),
    "usage_status": Field(X, replayed=True, event=True, shown=True),
    "input_tokens": Field(X, replayed=True, event=True, shown=True),
    "output_tokens": Field(X, replayed=True, event=True, shown=True),
    "estimated_cost_usd": Field(X, replayed=True, event=True, shown=True),
    # Not in the spec's ModelInvoked payload: the receipt (REST) has them.
    "route_plan_id": Field(C, replayed=False, event=False, shown=True),
    "fallback_used": Field(X, replayed=True, event=False, shown=True),  # ModelFallbackUsed says
    "request_hash": Field(C, replayed=False, event=False, shown=True),
    "idempotency_key": Field(C, replayed=False, event=False, shown=True),
    "policy_decision_id": Field(C, replayed=False, event=False, shown=True),
    "cached_input_tokens": Field(X, replayed=True, event=False, shown=True),
    # Of the input, the part written to the provider's prompt cache (Anthropic bills it
    # dearer), as cached_input_tokens: the reconciler prices it, and a replay reports it.
    "cache_write_input_tokens": Field(X, replayed=True, event=False, shown=True),
    "pricing_revision": Field(C, replayed=False, event=False, shown=True),
    "latency_ms": Field(X, replayed=True, event=False, shown=True),
    "time_to_first_token_ms": Field(X, replayed=True, event=False, shown=True),
    "output_artifact_ref": Field(X, replayed=True, event=False, shown=True),
    "provider_request_id": Field(X, replayed=True, event=False, shown=True),
    "started_at": Field(C, replayed=False, event=False, shown=True),
    "ended_at": Field(X, replayed=False, event=False, shown=True),
    # What reconciliation matched on: the reconciliation's own record shows it.
    "statement_ref": Field(S, replayed=False, event=False, shown=False),
    # A replay answers with it; the REST view predates it (a failure's problem body carries it).
    "close_reason": Field(X, replayed=True, event=False, shown=False),
    # The failure's own kind (a provider's `rate_limit`, `server_error`, …, or the router's),
    # migration 0022: the close reason names every provider failure `provider`, and a replay
    # told by it alone answered a transient one as a permanent 502 the SDKs retried. Not in the
    # spec's receipt or event: a gateway answer's receipt and a failure's problem body carry it.
    "error_kind": Field(X, replayed=True, event=False, shown=False),
    # The answer was held until complete (domain.buffering), known at the claim: issue 20.
    "buffered": Field(C, replayed=True, event=False, shown=True),
    # Which provider attempt answered (retries and fallbacks count from 1), at the close.
    "provider_attempt": Field(X, replayed=True, event=False, shown=True),
    # The call's data classification, known at the claim (migration 0023): what an item
    # reference to its answer must at least be sent as (api/responses_references.py). Not in
    # the spec's receipt or event.
    "data_classification": Field(C, replayed=False, event=False, shown=False),
}
del C, X, S

# Claim columns that InvocationInput does not carry: the receipt's provisional state.
PROVISIONAL = frozenset({"started_at"})
# Close columns that InvocationSummary does not carry as they are stored: derived at the close.
DERIVED = frozenset({"close_reason", "ended_at"})

CLAIMED = tuple(n for n, f in FIELDS.items() if f.written is Written.CLAIM and n not in PROVISIONAL)
CLOSED = tuple(n for n, f in FIELDS.items() if f.written is Written.CLOSE and n not in DERIVED)
REPLAYED = tuple(n for n, f in FIELDS.items() if f.replayed)
EVENT = tuple((n, to_camel(n)) for n, f in FIELDS.items() if f.event)
SHOWN = tuple(n for n, f in FIELDS.items() if f.shown)


def claim_values(data: InvocationInput, deployment_id: str, now: datetime) -> dict[str, Any]:
    """The in-flight receipt: Failed with usage Unknown until closed (what it stays if nothing
    ever closes it), no fallback yet, the first target as its deployment."""
    values = {n: getattr(data, n) for n in CLAIMED}
    values.update(
        deployment_id=deployment_id,
        fallback_used=False,
        outcome=InvocationOutcome.FAILED,
        usage_status=UsageStatus.UNKNOWN,
        started_at=now,
    )
    return values


def close_values(summary: InvocationSummary, now: datetime) -> dict[str, Any]:
    """What the close writes: the summary's account (an outcome or usage it does not know is
    the claim's Failed / Unknown; a deployment it does not name stays the claim's), why it
    closed, and when."""
    values = {n: getattr(summary, n) for n in CLOSED}
    outcome = values["outcome"] = summary.outcome or InvocationOutcome.FAILED
    values["usage_status"] = summary.usage_status or UsageStatus.UNKNOWN
    if summary.deployment_id is None:
        del values["deployment_id"]
    values["close_reason"] = close_reason(outcome, summary.error_kind).value
    values["ended_at"] = now
    return values


def summary_of(receipt: Mapping[str, Any]) -> InvocationSummary:
    """A closed receipt as a replay tells it: a failure by its stored kind, so that it answers
    as the call did (a transient failure with its status, a call our side lost never as the
    provider's error). A receipt closed before the kind was kept (migration 0022) has its close
    reason alone: the kind that reason names."""
    summary = InvocationSummary(**{n: receipt[n] for n in REPLAYED})
    summary.fallback_used = bool(summary.fallback_used)
    if summary.outcome is not InvocationOutcome.COMPLETED and summary.error_kind is None:
        summary.error_kind = replayed_kind(summary.close_reason)
    return summary


_PLAIN = frozenset({str, int, bool, type(None)})


def _json(value: Any) -> Any:
    # Once per field per receipt close: plain values first, the common and cheap case (the
    # isinstance chain alone made building ModelInvoked 5.0 µs; this way 3.5 µs).
    if type(value) in _PLAIN:
        return value
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Decimal):  # a string keeps an amount exact in JSON
        return decimal_text(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def model_invoked(receipt: Mapping[str, Any]) -> dict[str, Any]:
    """A receipt was written, or its usage settled: usage accounting keys on invocationId."""
    invocation = str(receipt["invocation_id"])
    return {
        "event_type": "ModelInvoked",
        "topic": TOPICS["ModelInvoked"],
        "aggregate_type": "InvocationReceipt",
        "aggregate_id": invocation,
        "payload": {key: _json(receipt[n]) for n, key in EVENT},
    }


# What a fallback gave the caller when it "answered" (the spec's ModelFallbackUsed: "an
# equivalent-constraint fallback answered"): a whole answer, or a stream cut after output. A
# fallback that failed too, or was cancelled, was taken (the receipt's `fallbackUsed`, the
# `fallbacks` metric: "fallbacks taken") but answered nothing.
ANSWERED = frozenset({InvocationOutcome.COMPLETED, InvocationOutcome.PARTIAL})


def fallback_answered(summary: InvocationSummary) -> bool:
    return summary.fallback_used and summary.outcome in ANSWERED


def fallback_used(receipt: Mapping[str, Any], summary: InvocationSummary) -> dict[str, Any]:
    """A fallback answered: whom it replaced and why (only the call knows; not a column)."""
    invocation = str(receipt["invocation_id"])
    return {
        "event_type": "ModelFallbackUsed",
        "topic": TOPICS["ModelFallbackUsed"],
        "aggregate_type": "InvocationReceipt",
        "aggregate_id": invocation,
        "payload": {
            "invocationId": invocation,
            "tenantId": receipt["tenant_id"],
            "profileId": receipt["profile_id"],
            "fromDeploymentId": summary.fallback_from,
            "toDeploymentId": receipt["deployment_id"],
            "reason": summary.fallback_reason,
        },
    }
