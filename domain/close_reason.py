"""Why a receipt closed: one word a replay can answer with and an operator can count by.

The receipt's outcome says what happened to the call (Completed, Failed, …); the close reason
says who ended it, so a replayed failure never blames the provider for what our side did (a
process that died mid-call is `caller-lost`, not a provider error).
"""

from __future__ import annotations

from enum import StrEnum

from domain.enums import InvocationOutcome


class CloseReason(StrEnum):
    COMPLETED = "completed"
    DENIED = "denied"
    PROVIDER = "provider"  # the provider (or the way to it) failed the call
    TIMEOUT = "timeout"  # the invocation's budget, or an attempt's, ran out
    CANCELLED = "cancelled"  # the caller went away and the call was stopped
    CALLER_LOST = "caller-lost"  # the process that held the call is gone
    # Refused for now: every candidate before any provider was called, the receipt store out of
    # reach at the claim (nothing claimed or called), or Temporal gone while a call begun
    # alongside its workflow's start ran (the call stopped, its claim undone).
    UNAVAILABLE = "unavailable"
    SWEPT = "swept"  # still open past the invocation budget: closed by the sweeper
    INTERNAL = "internal"  # the gateway itself failed the call after claiming it
    # The provider refused the request itself, the caller's to change: named apart from
    # `provider`, so that a replay answers as the call did (a 400; a context overflow as
    # `context_length_exceeded`, what agents compact the conversation on). Replayed as
    # `provider`, each was a 502 that no agent acts on.
    CONTEXT_LENGTH = "context-length"
    CONTENT_POLICY = "content-policy"
    INVALID_REQUEST = "invalid-request"


# Error kinds that name our side (or the caller's), not the provider's.
_OURS = {
    "timeout": CloseReason.TIMEOUT,
    "cancelled": CloseReason.CANCELLED,
    "caller-lost": CloseReason.CALLER_LOST,
    "unavailable": CloseReason.UNAVAILABLE,
    "store_unavailable": CloseReason.UNAVAILABLE,
    "temporal_unavailable": CloseReason.UNAVAILABLE,
    "swept": CloseReason.SWEPT,
    "internal": CloseReason.INTERNAL,
}


# Error kinds of a request the provider refused (domain.failures.CALLER_FAULT).
_REFUSED = {
    "context_length": CloseReason.CONTEXT_LENGTH,
    "content_policy": CloseReason.CONTENT_POLICY,
    "invalid_request": CloseReason.INVALID_REQUEST,
}
_KIND_OF = {reason.value: kind for kind, reason in _REFUSED.items()}


def close_reason(outcome: InvocationOutcome | None, error_kind: str | None) -> CloseReason:
    if outcome is InvocationOutcome.COMPLETED:
        return CloseReason.COMPLETED
    if outcome is InvocationOutcome.DENIED:
        return CloseReason.DENIED
    kind = error_kind or ""
    return _OURS.get(kind) or _REFUSED.get(kind) or CloseReason.PROVIDER


def replayed_kind(reason: str | None) -> str | None:
    """The error kind a replay answers with for a stored close reason: the reason itself, but
    a refused request's, which names its kind."""
    return _KIND_OF.get(reason or "", reason)


# Closes that happened without an answer from our side: the key is spent and the usage stays
# Unknown until reconciled, so the caller retries with a new key.
GATEWAY_CLOSES = frozenset({CloseReason.CALLER_LOST, CloseReason.SWEPT, CloseReason.INTERNAL})


# Closes of a call that failed before any output reached its caller, when it failed at all
# (outcome Failed, not Partial: output sent makes it Partial): its caller was answered with the
# failure's status, before any stream. Not a close our side made without an answer
# (GATEWAY_CLOSES), nor a cancellation: those may have come after output was streamed.
_BEFORE_OUTPUT = frozenset(
    {
        CloseReason.PROVIDER,
        CloseReason.TIMEOUT,
        CloseReason.UNAVAILABLE,
        CloseReason.CONTEXT_LENGTH,
        CloseReason.CONTENT_POLICY,
        CloseReason.INVALID_REQUEST,
    }
)


def failed_before_output(outcome: InvocationOutcome | None, reason: str | None) -> bool:
    """Whether a call was answered with its failure before any stream, so that a replay of its
    key is that failure again, not a stream (a 200 ending in an error event, where the call
    itself was a 503 the SDK could read)."""
    return outcome is InvocationOutcome.FAILED and reason in {r.value for r in _BEFORE_OUTPUT}
