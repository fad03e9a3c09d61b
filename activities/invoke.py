"""The provider call of one invocation, and closing receipts whose caller is gone.

The API process claims the receipt and `begin`s the provider call at once (a task held in the
in-memory hub); `call_provider` runs where the HTTP request lives (as a local activity after an
eager start, or on the API process's own task queue): it adopts that call from the hub and awaits
its outcome (the events stream to the caller through the hub meanwhile); the call's task writes
the receipt's close as it ends, or leaves it to the workflow when the store refuses it. The
activity's result carries ids, hashes and usage only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio import activity

from activities.adapter_pool import AdapterPool
from activities.answers_ahead import AnswersAhead
from activities.invoke_attempts import attempts_on
from activities.invoke_cancel import CancelledCalls
from activities.invoke_close import ReceiptCloser
from activities.invoke_closers import WorkflowCloses
from activities.invoke_hub import Attach, InvocationHub, PendingCall, ReceiptReady
from activities.invoke_outcomes import Outcome as _Outcome
from activities.invoke_outcomes import Route as _Route
from activities.invoke_outcomes import (
    circuit_open,
    ended_by_us,
    not_claimed,
    not_here,
)
from activities.invoke_prices import Prices
from activities.resilience import BreakerRegistry, Resilience
from domain.enums import InvocationOutcome, UsageStatus
from domain.fallback import Next, after_failure, may_answer
from domain.invocation import (
    Disposition,
    InvocationInput,
    InvocationSummary,
    Target,
)
from domain.provider_reports import recordable_request_id
from store.artifact_files import ArtifactFiles
from store.artifacts import ArtifactStore, reference
from store.receipt_statements import ReceiptStatements

log = logging.getLogger("model_router.invoke")

# How long a call's end waits for its caller's response to be over before it is reported to
# the workflow anyway (a slow reader of a large answer). The receipt is final before either.
DELIVERY_WAIT_SECONDS = 5.0


async def _after_delivery(pending: PendingCall) -> None:
    """Report the end of a call once the caller has its answer: the activity's result starts
    the SDK's work to complete the workflow task (encode, activate, complete) on this process's
    event loop, and ahead of the response's last bytes it was on the caller's path (quick
    bench, c=1, docs/benchmarks.md). A close the store refused (FINALIZE) is not held: the
    caller is waiting for the workflow to write it."""
    if pending.delivered.is_set():
        return
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(DELIVERY_WAIT_SECONDS):
            await pending.delivered.wait()


class InvokeActivities:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        hub: InvocationHub,
        adapters: AdapterPool,
        artifacts: ArtifactStore,
        resilience: Resilience | None = None,
        statements: ReceiptStatements | None = None,
        answers_ahead: int = 0,
        store_wait: float | None = None,
    ) -> None:
        self._statements = statements or ReceiptStatements(sessions.kw["bind"])
        self._prices = Prices(sessions, store_wait)
        self._resilience = resilience or Resilience()
        self._sessions = sessions
        self._hub = hub
        self._cancelled = CancelledCalls(hub)
        self._adapters = adapters
        self._files = ArtifactFiles(artifacts)
        self._closer = ReceiptCloser(self._statements, self._files, AnswersAhead(answers_ahead))
        # The closes the workflow runs itself (activities/invoke_closers.py).
        self.closes = WorkflowCloses(self._statements)

    @property
    def breakers(self) -> BreakerRegistry:
        return self._resilience.breakers

    @property
    def statements(self) -> ReceiptStatements:
        return self._statements

    @property
    def files(self) -> ArtifactFiles:
        """The answers' files, written and read off the event loop (store/artifact_files.py)."""
        return self._files

    @property
    def cancelled(self) -> CancelledCalls:
        """What becomes of calls whose adopting activity was cancelled (invoke_cancel.py)."""
        return self._cancelled

    @property
    def closer(self) -> ReceiptCloser:
        """Where a call's receipt is closed and its answer handed over (invoke_close.py)."""
        return self._closer

    def begin(self, data: InvocationInput, pending: PendingCall) -> None:
        """Start the provider call of a claimed invocation now, without waiting for the
        workflow task: the claim is the durable guarantee (one call per key), and the
        workflow's activity adopts the call from the hub and closes its receipt."""
        pending.work = asyncio.create_task(self._answer_safely(data, pending))
        pending.work.add_done_callback(lambda _: pending.settle())
        pending.begun.set()

    @activity.defn(name="call_provider")
    async def call_provider(self, data: InvocationInput) -> InvocationSummary:
        """Adopt the call the API process began for this invocation (or, for a request opened
        without the API's claim, claim and begin it here) and await its outcome, the receipt
        closed by the call's task or handed back here as FINALIZE. Cancelling this activity
        cancels the call."""
        token = data.caller_token
        # Or the call a stale activity of this run's evicted execution still holds here.
        pending = self._hub.claim(token) or self._hub.share(token)
        if pending is None:
            return not_here(data)
        try:
            return await self._adopt(data, pending)
        except asyncio.CancelledError:
            # Stopped, or let go of when the SDK evicted the run (activities/invoke_cancel.py).
            await self._cancelled.after_cancel(token, pending)
            raise
        finally:
            self._hub.release(token, pending)

    async def _adopt(self, data: InvocationInput, pending: PendingCall) -> InvocationSummary:
        if pending.caller_claims:
            await pending.begun.wait()  # set once the call began, alongside the start or after
        else:
            refused = await self._claim_here(data, pending)
            if refused is not None:
                return refused
        work = pending.work
        if work is None:  # the API could not start this workflow and undid its claim
            return not_here(data)
        # On the caller's queue the workflow watches heartbeats to notice a dead process; a
        # wait for a first token, or a backoff, must not look like one.
        beat = None if activity.info().is_local else asyncio.create_task(_heartbeat())
        try:
            # The call's outcome, its receipt already written (or FINALIZE: left to us).
            # Shielded: this activity's cancellation does not always stop the call.
            summary: InvocationSummary = await asyncio.shield(work)
        finally:
            if beat is not None:
                beat.cancel()
        if pending.caller_claims and summary.disposition is Disposition.DONE:
            await _after_delivery(pending)
        return summary

    async def _claim_here(
        self, data: InvocationInput, pending: PendingCall
    ) -> InvocationSummary | None:
        # One receipt per invocation, however many attempts and fallbacks it takes.
        try:
            claimed = await self._statements.claim(data, data.targets[0].deployment_id)
        except Exception as exc:  # the store is unreachable: nothing claimed, nothing called
            log.warning("receipt claim failed: %s", type(exc).__name__)
            summary = not_claimed(data)
            pending.events.put_nowait(ReceiptReady(summary))
            return summary
        if not claimed:
            pending.events.put_nowait(Attach())
            return InvocationSummary(
                invocation_id=data.invocation_id, disposition=Disposition.ALREADY_CLAIMED
            )
        self.begin(data, pending)
        return None

    async def _answer_safely(
        self, data: InvocationInput, pending: PendingCall
    ) -> InvocationSummary:
        """The call, then its receipt's close. The close is written right here, as the call
        ends: waiting for the workflow's local activity to be running first put the eager
        workflow task back on the response path of a short call (quick bench, c=1). The
        activity awaits this task and returns its summary; a close the store refused is
        handed to the workflow (FINALIZE), which retries it until the store answers, and the
        caller hears of the receipt once it is durable."""
        # From here on every way out closes the receipt, or hands its close to the workflow.
        started = time.monotonic()
        output: bytes | None = None
        try:
            summary, output = await self._answer(data, pending, started)
        except asyncio.CancelledError:
            # The activity that adopted the call stopped it (invoke_cancel.py): its workflow
            # asked to cancel or ended, or this process's workers stopping. Our side ended it,
            # so its receipt closes Failed, usage Unknown, close reason `internal` (the caller
            # told the key is spent, never a provider's failure), and the caller hears it. It
            # used to stay open for the sweeper while the caller's connection was dropped
            # mid-answer (tests/test_activity_cancelled.py).
            pending.request = None
            deployment = pending.answering or data.targets[0].deployment_id
            stopped = ended_by_us(data, deployment, started, "the call was cancelled")
            await self._closer.close(data, pending, stopped, None)
            raise
        except Exception as exc:  # our own failure after the claim, never the provider's
            log.error("invocation failed after its claim: %s", type(exc).__name__)
            # The deployment that was answering, as the cancel above names it: the primary's
            # joined a fallback's receipt to the wrong provider and model in the reconciler.
            summary = ended_by_us(data, pending.answering or data.targets[0].deployment_id, started)
        finally:
            pending.request = None  # the content is not kept a moment longer than the call
        if pending.stopped_by_failed_start(summary.outcome):  # its claim is undone by the API
            return not_here(data)
        return await self._closer.close(data, pending, summary, output)

    async def _answer(
        self, data: InvocationInput, pending: PendingCall, started: float
    ) -> tuple[InvocationSummary, bytes | None]:
        """The call's summary, its receipt's reference to the answer's file set, and the file's
        content (written by the caller, beside the receipt's close)."""
        result = await self._run(data, pending, started)
        target = result.target or data.targets[0]
        # The plan's first candidate, which may have been passed over before any call (it is
        # Degraded): then even the first target answering is a fallback.
        primary = data.primary_deployment_id or data.targets[0].deployment_id
        fell_back = result.target is not None and target.deployment_id != primary
        request_id = recordable_request_id(result.provider_request_id)
        if request_id != result.provider_request_id:
            log.warning("provider request id past what a receipt holds, left out")
        summary = InvocationSummary(
            invocation_id=data.invocation_id,
            outcome=result.outcome,
            usage_status=result.usage,
            deployment_id=target.deployment_id,
            input_tokens=result.input_tokens,
            output_tokens=result.output_tokens,
            cached_input_tokens=result.cached,
            cache_write_input_tokens=result.cache_written,
            latency_ms=int((time.monotonic() - started) * 1000),
            time_to_first_token_ms=result.ttft_ms,
            provider_request_id=request_id,
            error_kind=result.error_kind,
            error_reason=result.error_reason,
            fallback_used=fell_back,
            fallback_from=primary if fell_back else None,
            fallback_reason=result.fallback_reason if fell_back else None,
            buffered=data.buffered,
            provider_attempt=result.attempt,
        )
        if result.artifact is not None:
            summary.output_artifact_ref = reference(result.artifact)
        if (
            result.outcome is InvocationOutcome.COMPLETED
            and result.input_tokens is not None
            and result.output_tokens is not None
        ):
            # Only the attempt that answered is priced; failed attempts are never billed.
            try:
                summary.estimated_cost_usd = await self._prices.cost(
                    data, target.provider, target.model, result
                )
            except Exception as exc:  # the pricebook is unreadable: the answer still stands
                log.warning("pricing failed, cost left unknown: %s", type(exc).__name__)
        return summary, result.artifact

    async def _run(self, data: InvocationInput, pending: PendingCall, started: float) -> _Outcome:
        route = _Route()
        work = asyncio.create_task(self._route(data, pending, started, route))
        cancelled = asyncio.create_task(pending.cancelled.wait())
        try:
            done, _ = await asyncio.wait(
                {work, cancelled}, timeout=data.timeout_seconds, return_when=asyncio.FIRST_COMPLETED
            )
        except asyncio.CancelledError:
            work.cancel()
            raise
        finally:
            cancelled.cancel()
        if work in done:
            result: _Outcome = work.result()
            result.attempt = route.attempts or None
            return result
        work.cancel()
        # A caller that left, or a call past its budget: billable work may have happened.
        kind = "cancelled" if pending.cancelled.is_set() else "timeout"
        if kind == "cancelled":
            outcome = InvocationOutcome.CANCELLED
        else:
            outcome = InvocationOutcome.PARTIAL if route.emitted else InvocationOutcome.FAILED
        return _Outcome(
            outcome,
            UsageStatus.UNKNOWN,
            error_kind=kind,
            target=route.current,
            ttft_ms=route.ttft_ms,
            output_tokens=route.emitted_tokens or None,
            fallback_reason=route.fallback_reason,
            provider_request_id=route.provider_request_id,
            attempt=route.attempts or None,
        )

    async def _route(
        self, data: InvocationInput, pending: PendingCall, started: float, route: _Route
    ) -> _Outcome:
        """The candidates in route order: each allowed by its breaker and by the fallback rules
        relative to the last failure, retried on transient failures, until one answers."""
        failed: Target | None = None
        reason = ""
        skipped: list[str] = []
        last: _Outcome | None = None
        # Why the plan's first candidate is not called at all, if it is not (Degraded, …).
        route.fallback_reason = data.primary_passed_over
        for target in data.targets:
            if failed is not None and not may_answer(data, failed, target, reason):
                continue
            breaker = self._resilience.breakers.get(data.tenant_id, target.deployment_id)
            if not breaker.allow():
                skipped.append(target.deployment_id)
                failed, reason = target, "circuit_open"
                route.fallback_reason = route.fallback_reason or reason
                continue
            route.current = target
            pending.answering = target.deployment_id
            result = await attempts_on(
                target, breaker, data, pending, started, route, self._adapters, self._resilience
            )
            result.target = target
            result.fallback_reason = route.fallback_reason
            if result.outcome is not InvocationOutcome.FAILED or (
                after_failure(result.error_kind or "") is Next.STOP
            ):
                return result
            failed, reason, last = target, result.error_kind or "", result
            route.fallback_reason = route.fallback_reason or reason
        if last is not None:
            return last
        # Nothing was called: every candidate was refused before any provider saw the request.
        return _Outcome(
            InvocationOutcome.FAILED,
            UsageStatus.ESTIMATED,
            input_tokens=0,
            output_tokens=0,
            error_kind="unavailable",
            error_reason=circuit_open(skipped),
        )


async def _heartbeat() -> None:
    while True:
        activity.heartbeat()
        await asyncio.sleep(3)
