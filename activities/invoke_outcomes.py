"""What one attempt, or a whole route, came to: the pieces the invoke activity folds into the
receipt's summary (ids, counts and classes; the output itself only as artifact bytes)."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field

from activities.invoke_hub import PendingCall
from core import metrics, timing
from domain.enums import InvocationOutcome, UsageStatus
from domain.failures import refused_unbilled
from domain.hashing import canonical_json
from domain.invocation import (
    Disposition,
    InvocationInput,
    InvocationSummary,
    Target,
    provider_of,
)
from domain.provider_reports import recordable
from providers.base import ProviderAdapter
from providers.errors import ErrorKind, ProviderError
from providers.types import CallLimits, ChatRequest, Completion

log = logging.getLogger("model_router.invoke")

TRANSIENT = frozenset(k.value for k in ErrorKind if k.transient)
# Failures after which the provider may still bill the attempt: it had the request and was
# working on it when we stopped listening, or its answer was cut off. (Refusals — 429, 5xx,
# 4xx — are not billed; a connection that failed may never have carried the request.)
MAYBE_BILLED = frozenset({ErrorKind.TIMEOUT.value, ErrorKind.STREAM_INCOMPLETE.value})


@dataclass
class Outcome:
    outcome: InvocationOutcome
    usage: UsageStatus
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached: int | None = None
    # Of the input, what the provider wrote to its prompt cache (Anthropic bills it apart).
    cache_written: int | None = None
    artifact: bytes | None = None
    provider_request_id: str | None = None
    ttft_ms: int | None = None
    error_kind: str | None = None
    error_reason: str | None = None
    retry_after: float | None = None
    target: Target | None = None
    fallback_reason: str | None = None
    finish_reason: str | None = None
    response_model: str | None = None
    # The call's provider attempt this outcome is of (1, 2, … over retries and fallbacks).
    attempt: int | None = None


@dataclass
class Route:
    """What the caller has seen so far, across attempts: once `emitted` is not empty, no other
    attempt may answer."""

    current: Target | None = None
    ttft_ms: int | None = None
    emitted: list[str] = field(default_factory=list)
    fallback_reason: str | None = None
    # The last failed attempt, while the provider may bill it: (provider, error kind).
    maybe_billed: tuple[str, str] | None = None
    # The current attempt's provider request id, from the moment its headers arrived: kept on
    # the receipt however that attempt ends (stalled, garbled, cut or out of budget).
    provider_request_id: str | None = None
    # Provider attempts started so far: the last is the one that answered, if one did.
    attempts: int = 0
    # An attempt before this one ended with its usage uncertain (a timeout, a cut stream, a
    # 5xx): the provider may have billed it, so a later refusal does not make the receipt's
    # usage known (Estimated at zero would have taken it out of reconciliation).
    uncertain: bool = False

    def usage_of(self, out: Outcome) -> Outcome:
        """`out` as the receipt may say it: a failure known to have cost nothing is Unknown
        when an earlier attempt of the call may have been billed."""
        if self.uncertain and out.outcome is InvocationOutcome.FAILED:
            if out.usage is UsageStatus.ESTIMATED:
                out.usage, out.input_tokens, out.output_tokens = UsageStatus.UNKNOWN, None, None
        return out

    def attempt_starts(self) -> None:
        """A new attempt (a retry or a fallback) replaces the last failed one, whose usage no
        receipt will carry: the receipt is the answering (or last) attempt's. So it is counted
        where a provider may bill it."""
        if self.maybe_billed is not None:
            provider, reason = self.maybe_billed
            metrics.attempts_abandoned.add(1, {"provider": provider, "reason": reason})
        self.maybe_billed = None
        self.provider_request_id = None
        self.attempts += 1

    def attempt_failed(self, provider: str, kind: str) -> None:
        self.maybe_billed = (provider, kind) if kind in MAYBE_BILLED else None

    @property
    def emitted_tokens(self) -> int:
        return estimate_tokens("".join(self.emitted)) if self.emitted else 0


def estimate_tokens(text: str) -> int:
    # Our own count where the provider said nothing: about four characters a token.
    return max(1, (len(text) + 3) // 4)


def failed(exc: ProviderError, outcome: InvocationOutcome = InvocationOutcome.FAILED) -> Outcome:
    unbilled = outcome is InvocationOutcome.FAILED and refused_unbilled(
        exc.kind.value, exc.status_code
    )
    return Outcome(
        outcome,
        UsageStatus.ESTIMATED if unbilled else UsageStatus.UNKNOWN,
        input_tokens=0 if unbilled else None,
        output_tokens=0 if unbilled else None,
        error_kind=exc.kind.value,
        error_reason=exc.reason,
        retry_after=exc.retry_after,
        provider_request_id=exc.provider_request_id,
    )


def reported(*counts: int | None) -> bool:
    """Whether a provider's usage report can be recorded (domain/provider_reports.py); one that
    cannot is taken as no report, and said so in the log (counts only, never content)."""
    if recordable(*counts):
        return True
    log.warning("provider usage report past what a receipt holds, our own count recorded")
    return False


def completed(request: ChatRequest, completion: Completion, ttft_ms: int | None) -> Outcome:
    body = completion.model_dump(mode="json", exclude={"usage"})
    report = completion.usage
    if report is not None and reported(
        report.input_tokens, report.output_tokens, report.cached_input_tokens
    ):
        usage = UsageStatus.REPORTED
        tokens_in, tokens_out = report.input_tokens, report.output_tokens
        cached: int | None = report.cached_input_tokens
        written: int | None = report.cache_write_input_tokens
    else:
        usage = UsageStatus.ESTIMATED
        tokens_in = estimate_tokens(json.dumps(request.model_dump(mode="json")))
        tokens_out = estimate_tokens(completion.text + json.dumps(body["tool_calls"]))
        cached = written = None
    return Outcome(
        outcome=InvocationOutcome.COMPLETED,
        usage=usage,
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        cached=cached,
        cache_written=written,
        artifact=canonical_json(body),
        provider_request_id=completion.provider_request_id,
        ttft_ms=ttft_ms,
        finish_reason=completion.finish_reason.value,
        response_model=completion.response_model,
    )


async def embed_once(adapter: ProviderAdapter, pending: PendingCall, limits: CallLimits) -> Outcome:
    inputs: list[str]
    inputs, dimensions = pending.request  # dimensions: None for the model's own width
    try:
        with timing.waiting():
            result = await adapter.embed(inputs, dimensions=dimensions, limits=limits)
    except ProviderError as exc:
        return failed(exc)
    pending.events.put_nowait(result)
    tokens = result.input_tokens if reported(result.input_tokens) else None
    return Outcome(
        outcome=InvocationOutcome.COMPLETED,
        usage=UsageStatus.REPORTED if tokens is not None else UsageStatus.ESTIMATED,
        input_tokens=tokens if tokens is not None else sum(map(estimate_tokens, inputs)),
        output_tokens=0,
        artifact=canonical_json({"vectors": [list(v) for v in result.vectors]}),
        provider_request_id=result.provider_request_id,
    )


async def rerank_once(
    adapter: ProviderAdapter, pending: PendingCall, limits: CallLimits
) -> Outcome:
    query, documents, top_n = pending.request
    try:
        with timing.waiting():
            result = await adapter.rerank(query, documents, top_n=top_n, limits=limits)
    except ProviderError as exc:
        return failed(exc)
    pending.events.put_nowait(result)
    tokens = result.input_tokens if reported(result.input_tokens) else None
    return Outcome(
        outcome=InvocationOutcome.COMPLETED,
        usage=UsageStatus.REPORTED if tokens is not None else UsageStatus.ESTIMATED,
        input_tokens=tokens if tokens is not None else estimate_tokens(query + "".join(documents)),
        output_tokens=0,
        artifact=canonical_json({"results": [r.model_dump() for r in result.results]}),
        provider_request_id=result.provider_request_id,
    )


def count_invocation(data: InvocationInput, summary: InvocationSummary) -> None:
    """`record_metrics` for an invocation whose input is at hand: its provider the answering
    target's."""
    provider = provider_of(data, summary.deployment_id)
    record_metrics(data.tenant_id, data.profile_id, provider, summary)


def record_metrics(
    tenant_id: str, profile_id: str, provider: str, summary: InvocationSummary
) -> None:
    """The spec's instruments, with ids and classes as dimensions (never content): counted by
    whoever wrote the receipt's close, once (the call's own close as it hands the answer over,
    the workflow's `finalize_receipt` or `close_abandoned_receipt` otherwise)."""
    outcome = summary.outcome.value if summary.outcome else "Unknown"
    metrics.invocations.add(
        1, {"tenant": tenant_id, "profile": profile_id, "provider": provider, "outcome": outcome}
    )
    where = {"profile": profile_id, "provider": provider}
    if summary.time_to_first_token_ms is not None:
        metrics.latency.record(summary.time_to_first_token_ms / 1000, {**where, "phase": "ttft"})
    if summary.latency_ms is not None:
        metrics.latency.record(summary.latency_ms / 1000, {**where, "phase": "completion"})
    for direction, count in (("input", summary.input_tokens), ("output", summary.output_tokens)):
        if count:
            metrics.tokens.add(count, {"tenant": tenant_id, **where, "direction": direction})
    if summary.fallback_used:
        metrics.fallbacks.add(
            1, {"profile": profile_id, "reason": summary.fallback_reason or "unknown"}
        )
    # usage_unknown is recounted from the store when exported (core.metrics.set_usage_unknown),
    # not tallied here: a tally forgets every receipt written before a restart or elsewhere.


# Off the hot path, what records less than `record_metrics` counts under its series, with the
# same dimensions, so that a sum by outcome, or of tokens, holds every receipt. `record_metrics`
# keeps its own inline adds: a completed call makes no call more than it did.


def count_outcome(
    tenant_id: str, profile_id: str, provider: str, outcome: InvocationOutcome
) -> None:
    """`invocations` alone, for a close with nothing else to record: the sweeper's (Failed,
    usage Unknown, no latency, no tokens, no fallback event)."""
    where = {"tenant": tenant_id, "profile": profile_id, "provider": provider}
    metrics.invocations.add(1, {**where, "outcome": outcome.value})


def count_tokens(
    tenant_id: str, profile_id: str, provider: str, input_tokens: int, output_tokens: int
) -> None:
    """`tokens` alone, for usage learnt after the close (the reconciler's settlements)."""
    where = {"tenant": tenant_id, "profile": profile_id, "provider": provider}
    for direction, count in (("input", input_tokens), ("output", output_tokens)):
        if count > 0:
            metrics.tokens.add(count, {**where, "direction": direction})


def circuit_open(deployment_ids: list[str]) -> str:
    """Why nothing was called when every candidate's breaker refused."""
    return "no candidate available: circuit open for " + ", ".join(deployment_ids)


def refused_by_breakers(data: InvocationInput) -> InvocationSummary:
    """The answer to a call every candidate's breaker refuses before its claim: nothing claimed
    or called, the key unused for the retry the caller is told to make."""
    return InvocationSummary(
        invocation_id=data.invocation_id,
        disposition=Disposition.NOT_CLAIMED,
        outcome=InvocationOutcome.FAILED,
        deployment_id=data.targets[0].deployment_id,
        error_kind="unavailable",
        error_reason=circuit_open([t.deployment_id for t in data.targets]),
    )


def not_claimed(data: InvocationInput) -> InvocationSummary:
    """The answer to a call whose receipt could not be claimed (the store is unreachable):
    nothing was claimed or called."""
    return InvocationSummary(
        invocation_id=data.invocation_id,
        disposition=Disposition.NOT_CLAIMED,
        outcome=InvocationOutcome.FAILED,
        deployment_id=data.targets[0].deployment_id,
        error_kind="store_unavailable",
    )


def not_started(data: InvocationInput) -> InvocationSummary:
    """The answer to a call begun alongside a workflow start that failed (Temporal went away):
    the call was cancelled and its claim undone; no receipt is kept and the key stays unused."""
    return not_claimed(data).model_copy(update={"error_kind": "temporal_unavailable"})


def not_here(data: InvocationInput) -> InvocationSummary:
    """The answer of an activity with no call of this invocation to adopt in this process."""
    return InvocationSummary(invocation_id=data.invocation_id, disposition=Disposition.NOT_HERE)


def ended_by_us(
    data: InvocationInput, deployment_id: str, started: float, reason: str | None = None
) -> InvocationSummary:
    """A call our side ended after its claim (an exception of ours, its adopting activity
    cancelled): Failed, usage Unknown (the provider may have billed), close reason `internal`,
    never blamed on the provider."""
    return InvocationSummary(
        invocation_id=data.invocation_id,
        outcome=InvocationOutcome.FAILED,
        usage_status=UsageStatus.UNKNOWN,
        deployment_id=deployment_id,
        latency_ms=int((time.monotonic() - started) * 1000),
        error_kind="internal",
        error_reason=reason,
    )
