"""What a failed invocation means to its caller, whatever surface it came through: the caller's
own mistake (change the request), a transient failure (come back: the same request may succeed
later), or a permanent one on the provider's side (retrying will not help until an operator
acts). Every surface maps these three, and only these, to its status codes."""

from __future__ import annotations

from enum import StrEnum

from domain.close_reason import GATEWAY_CLOSES, CloseReason


class FailureClass(StrEnum):
    CALLER = "caller"
    TRANSIENT = "transient"
    PERMANENT = "permanent"


# The request itself is at fault: no provider would answer it.
CALLER_FAULT = frozenset({"content_policy", "context_length", "invalid_request"})
# The provider error kinds that are transient (providers.errors.ErrorKind.transient, kept equal
# by tests/test_failure_status.py), plus the router's own: every candidate refused for now
# (`unavailable`), the invocation's overall budget spent (`timeout`), and the receipt store out of
# reach at the claim (`store_unavailable`: nothing was claimed or called), and Temporal gone
# while a call begun alongside its workflow's start ran (`temporal_unavailable`: the call was
# cancelled and its claim undone).
TRANSIENT = frozenset(
    {
        "connection",
        "timeout",
        "rate_limit",
        "server_error",
        "overloaded",
        "stream_incomplete",
        "unavailable",
        "store_unavailable",
        "temporal_unavailable",
    }
)

# Transient kinds that say the provider is busy, not unwell: it answered, and asked for less. A
# breaker still opens on them (the next candidate serves meanwhile), but a trial failing so is
# not sustained failure to report: the recovery trial's one-token request got through where
# real calls were refused, so under a sustained rate limit the deployment went Degraded and
# Approved again every cool-down, each move an event, a webhook and a new catalog version.
BUSY = frozenset({"rate_limit", "overloaded"})

# How soon a caller refused because the receipt store was out of reach may come back, on every
# path that refuses so (a claim that failed, any other statement of a request): a PostgreSQL
# restart or failover takes seconds, and the next request runs on a fresh connection
# (tests/test_fault_postgres.py). Not the providers' cool-down: no provider was asked.
STORE_RETRY_AFTER_SECONDS = 2


# Statuses a provider refuses with before it takes the request, billing nothing: its own limit,
# the key, the quota, a model or route it does not have, a request it would not take, and
# Anthropic's 529 (overloaded: not taken). Not 408 or 409 (the request may have been taken),
# not a 5xx (it may have failed after doing work), and not a content filter (Azure bills a
# prompt it filtered).
_TAKEN_NOT = frozenset({"content_policy"})


def refused_unbilled(kind: str, status_code: int | None) -> bool:
    """Whether a failed call's provider answered with a refusal that bills nothing, so that its
    receipt's usage is known (Estimated, zero tokens: `domain.statements.sent_nothing`), not
    Unknown: only a timeout, a cut answer or a failure after work leaves usage uncertain
    (DESIGN §4.6). As Unknown, every 429 of a rate-limited hour waited on the reconciler, took a
    share of the hour's tokens nobody else explained, and counted in `usage_unknown`."""
    if status_code is None or kind in _TAKEN_NOT:
        return False
    return status_code == 529 or (400 <= status_code < 500 and status_code not in (408, 409))


# Kinds of a call closed before its answer was whole by our side (GATEWAY_CLOSES: the process
# holding it died, the sweeper closed it, the gateway failed after the claim) or by its caller's
# leaving (`cancelled`, mid-stream): the key is spent, the provider may have billed, and the
# key can only replay this. Every surface answers them alike: a 409 saying the call is closed
# and to retry with a new key, never a provider's failure (a Cancelled key replayed as a 502
# "model call failed: cancelled", errorClass permanent, blaming the provider).
KEY_CLOSED = frozenset({*(c.value for c in GATEWAY_CLOSES), CloseReason.CANCELLED.value})


def classify(kind: str | None) -> FailureClass:
    if kind in CALLER_FAULT:
        return FailureClass.CALLER
    if kind in TRANSIENT:
        return FailureClass.TRANSIENT
    return FailureClass.PERMANENT


def error_class(kind: str | None) -> str:
    """The `errorClass` every surface reports: `transient` (may succeed later) or `permanent`
    (the request or the provider must change first)."""
    return "transient" if classify(kind) is FailureClass.TRANSIENT else "permanent"
