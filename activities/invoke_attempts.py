"""The attempts on one deployment: each provider call, retried as domain.retry says, and what
the caller hears of it.

A chat attempt's events go to the caller (through the hub) as they arrive, or, for a held call
(`InvocationInput.buffered`, domain.buffering: a non-stream call, a stream on a Batch profile or
one the caller asked to hold), wait here in memory until the attempt completes. What the
provider sent is then not what the caller saw: a cut, stall or garbled event before the end
leaves nothing emitted, and the attempt is retried or fallen back from like any other failure.
Only the answering attempt's events are released, so nothing is ever spliced, and a held call's
time to first token is the moment they are released (the caller's first byte), not the
provider's first token. A passed-through stream does no extra work per event for this.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time

from activities import invoke_spans
from activities.adapter_pool import AdapterPool
from activities.invoke_hub import Output, PendingCall
from activities.invoke_outcomes import (
    TRANSIENT,
    Outcome,
    Route,
    completed,
    embed_once,
    failed,
    rerank_once,
)
from activities.resilience import Resilience, call_limits, timed_stream
from core import metrics, timing
from domain.breaker import Breaker
from domain.enums import InvocationOutcome, UsageStatus
from domain.failures import BUSY
from domain.invocation import AttemptTimeouts, InvocationInput, Operation, Target
from domain.retry import retry_delay
from providers.base import ProviderAdapter
from providers.completion_fold import CompletionBuilder
from providers.errors import ErrorKind, ProviderError
from providers.secrets import SecretResolutionError
from providers.types import Accepted, ChatRequest, KeepAlive, TextDelta, ToolCallDelta

log = logging.getLogger("model_router.invoke")

# What the caller (and the receipt) is told of a deployment whose credentials did not resolve.
CREDENTIALS_UNRESOLVED = "the deployment's credentials could not be resolved"


async def attempts_on(
    target: Target,
    breaker: Breaker,
    data: InvocationInput,
    pending: PendingCall,
    started: float,
    route: Route,
    adapters: AdapterPool,
    resilience: Resilience,
) -> Outcome:
    """The attempts on one deployment: retried on transient failures as domain.retry says
    (within the breaker and the call's budget), never once output reached the caller."""
    timeouts = resilience.timeouts_for(data.profile_id, target.deployment_id)
    attempt = 0
    while True:
        attempt += 1
        try:
            # Each attempt: a retry's lease may find the client due for its refresh.
            await adapters.ready(target, data.tenant_id)
        except SecretResolutionError as exc:
            # The credentials are missing or not allowed (docs/runbook.md), or the reference is
            # kept for other tenants now (activities/adapter_pool.py): not called now, and the
            # next candidate may answer (`auth` moves on).
            # A retry's used to escape the call as our own failure (`internal`). The caller
            # hears only that; which reference and why (never a secret: the broker's messages
            # name none) is the operator's, in the log. As the reason, the caller's 502 named
            # the deployment's endpointRef and the variable or file behind it.
            log.warning("deployment %s: credentials not resolved: %s", target.deployment_id, exc)
            first = attempt == 1
            return route.usage_of(
                Outcome(
                    InvocationOutcome.FAILED,
                    UsageStatus.ESTIMATED if first else UsageStatus.UNKNOWN,
                    input_tokens=0 if first else None,
                    output_tokens=0 if first else None,
                    error_kind=ErrorKind.AUTH.value,
                    error_reason=CREDENTIALS_UNRESOLVED,
                )
            )
        route.attempt_starts()
        # On the breaker's clock: its outcome moves the breaker only if it began after the
        # breaker last opened (domain/breaker.py).
        began = breaker.clock()
        remaining = started + data.timeout_seconds - time.monotonic()
        # Leased for the attempt: a refresh meanwhile never closes the client under it.
        async with adapters.lease(target, data.tenant_id) as adapter:
            with invoke_spans.provider_call(data, target, attempt) as span:
                result = await attempt_once(
                    data, adapter, pending, started, timeouts, remaining, route
                )
                invoke_spans.record(span, result)
        if result.outcome is InvocationOutcome.COMPLETED:
            breaker.success(began)
            return result
        kind = result.error_kind or "server_error"
        metrics.provider_errors.add(1, {"provider": target.provider, "class": kind})
        route.attempt_failed(target.provider, kind)
        # Judged by the attempts before this one; then this one's uncertainty counts too.
        result = route.usage_of(result)
        route.uncertain = route.uncertain or result.usage is UsageStatus.UNKNOWN
        transient = kind in TRANSIENT
        if transient:
            breaker.failure(
                result.retry_after,
                busy=kind in BUSY,
                started_at=began,
                kind=kind,  # for the network rule on Degraded reports (domain/breaker.py)
                provider=target.provider,
            )
        if result.outcome is InvocationOutcome.PARTIAL:
            return result  # output reached the caller: never retried, never spliced
        delay = retry_delay(
            resilience.retry,
            attempt,
            kind,
            transient,
            result.retry_after,
            random.random(),  # noqa: S311 - jitter, not a secret
            started + data.timeout_seconds - time.monotonic(),
        )
        if delay is None or not breaker.allow():
            return result
        # A wait the provider asked for (its Retry-After) or its failure caused: the provider's
        # time in Server-Timing and the overhead histogram, not the gateway's (a 429 with
        # Retry-After: 2 read as two seconds of gateway overhead).
        with timing.waiting():
            await asyncio.sleep(delay)


async def attempt_once(
    data: InvocationInput,
    adapter: ProviderAdapter,
    pending: PendingCall,
    started: float,
    timeouts: AttemptTimeouts,
    remaining: float,
    route: Route,
) -> Outcome:
    """One provider call within the attempt bound (and what is left of the call's budget)."""
    budget = min(timeouts.attempt, remaining)
    if data.operation is not Operation.CHAT:
        try:
            async with asyncio.timeout(budget):
                if data.operation is Operation.EMBED:
                    return await embed_once(adapter, pending, call_limits(timeouts))
                return await rerank_once(adapter, pending, call_limits(timeouts))
        except TimeoutError:
            return failed(ProviderError(ErrorKind.TIMEOUT, provider=adapter.provider))
    request: ChatRequest = pending.request
    builder = CompletionBuilder()
    held: list[Output] | None = [] if data.buffered else None
    try:
        async for event in timed_stream(adapter, request, timeouts, budget):
            if isinstance(event, Accepted):
                route.provider_request_id = event.provider_request_id
                continue  # ours, not the caller's
            if isinstance(event, KeepAlive):
                # Only once output has started (timed_stream): the caller's stream keeps alive
                # too. A held answer sends nothing until it is whole.
                if held is None:
                    pending.events.put_nowait(event)
                continue
            builder.add(event)
            if held is not None:
                held.append(event)
                continue
            first = False
            if isinstance(event, TextDelta | ToolCallDelta):
                if route.ttft_ms is None:
                    route.ttft_ms = int((time.monotonic() - started) * 1000)
                    first = True
                route.emitted.append(
                    event.text if isinstance(event, TextDelta) else event.arguments_delta
                )
            pending.events.put_nowait(event)
            if first:
                await pending.hand_over()
        completion = builder.build()
    except ProviderError as exc:
        if route.emitted:
            # Output reached the caller: Partial, the emitted tokens counted as our estimate
            # while what the provider bills for it stays Unknown.
            out = failed(exc, InvocationOutcome.PARTIAL)
            out.output_tokens, out.ttft_ms = route.emitted_tokens, route.ttft_ms
        else:
            out = failed(exc)
        # A stall or a garbled chunk is seen outside the adapter, which knew the id.
        out.provider_request_id = out.provider_request_id or route.provider_request_id
        return out
    if held is not None:
        # The answer is whole: only now does the caller hear of it, from this attempt only,
        # and its first byte leaves now.
        route.ttft_ms = int((time.monotonic() - started) * 1000)
        for event in held:
            pending.events.put_nowait(event)
    return completed(request, completion, route.ttft_ms)
