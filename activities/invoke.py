"""The provider call of one invocation, and closing receipts whose caller is gone.

`call_provider` runs where the HTTP request lives (as a local activity after an eager start, or
on the API process's own task queue): it takes the request from the in-memory hub, claims the
receipt, streams the provider's events back through the hub, stores the output as an artifact,
and finalises the receipt. Its result carries ids, hashes and usage only.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio import activity

from activities.adapter_pool import AdapterPool
from activities.invoke_hub import Attach, InvocationHub, PendingCall, ReceiptReady
from core import metrics
from domain.enums import InvocationOutcome, UsageStatus
from domain.hashing import canonical_json
from domain.invocation import Disposition, InvocationInput, InvocationSummary, Operation
from domain.pricing import Pricebook, estimate_cost_usd
from providers.base import ProviderAdapter
from providers.errors import ProviderError
from providers.types import ChatRequest, CompletionBuilder, TextDelta, ToolCallDelta
from store import pricebook, receipts
from store.artifacts import ArtifactStore


@dataclass
class _Outcome:
    outcome: InvocationOutcome
    usage: UsageStatus
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached: int | None = None
    artifact: bytes | None = None
    provider_request_id: str | None = None
    ttft_ms: int | None = None
    error_kind: str | None = None


def _estimate_tokens(text: str) -> int:
    # Our own count where the provider said nothing: about four characters a token.
    return max(1, (len(text) + 3) // 4)


class InvokeActivities:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        hub: InvocationHub,
        adapters: AdapterPool,
        artifacts: ArtifactStore,
    ) -> None:
        self._sessions = sessions
        self._hub = hub
        self._adapters = adapters
        self._artifacts = artifacts
        self._prices: dict[tuple[str, str], Pricebook | None] = {}

    async def _pricebook(self, tenant_id: str, revision: str) -> Pricebook | None:
        # Revisions are immutable, so a process may keep what it read.
        key = (tenant_id, revision)
        if key not in self._prices:
            async with self._sessions() as session:
                self._prices[key] = await pricebook.load(session, tenant_id, revision)
        return self._prices[key]

    @activity.defn(name="call_provider")
    async def call_provider(self, data: InvocationInput) -> InvocationSummary:
        pending = self._hub.claim(data.caller_token)
        if pending is None:
            return InvocationSummary(
                invocation_id=data.invocation_id, disposition=Disposition.NOT_HERE
            )
        target = data.targets[0]
        if not await receipts.claim(self._sessions, data, target.deployment_id):
            pending.events.put_nowait(Attach())
            return InvocationSummary(
                invocation_id=data.invocation_id, disposition=Disposition.ALREADY_CLAIMED
            )
        started = time.monotonic()
        result = await self._run(data, pending, started)
        summary = InvocationSummary(
            invocation_id=data.invocation_id,
            outcome=result.outcome,
            usage_status=result.usage,
            deployment_id=target.deployment_id,
            input_tokens=result.input_tokens,
            output_tokens=result.output_tokens,
            cached_input_tokens=result.cached,
            latency_ms=int((time.monotonic() - started) * 1000),
            time_to_first_token_ms=result.ttft_ms,
            provider_request_id=result.provider_request_id,
            error_kind=result.error_kind,
        )
        if result.artifact is not None:
            summary.output_artifact_ref = self._artifacts.put(data.tenant_id, result.artifact)
        if result.input_tokens is not None and result.output_tokens is not None:
            summary.estimated_cost_usd = await self._cost(
                data, target.provider, target.model, result
            )
        await receipts.finalize(self._sessions, data.tenant_id, summary)
        pending.events.put_nowait(ReceiptReady(summary))
        record_metrics(data, target.provider, summary)
        return summary

    async def _cost(
        self, data: InvocationInput, provider: str, model: str, result: _Outcome
    ) -> Decimal | None:
        book = await self._pricebook(data.tenant_id, data.pricing_revision)
        price = book.price_for(provider, model, datetime.now(UTC).date()) if book else None
        if price is None:
            return None
        return estimate_cost_usd(
            price,
            input_tokens=result.input_tokens or 0,
            output_tokens=result.output_tokens or 0,
            cached_input_tokens=min(result.cached or 0, result.input_tokens or 0),
        )

    async def _run(self, data: InvocationInput, pending: PendingCall, started: float) -> _Outcome:
        work = asyncio.create_task(self._call(data, pending, started))
        cancelled = asyncio.create_task(pending.cancelled.wait())
        try:
            done, _ = await asyncio.wait(
                {work, cancelled}, timeout=data.timeout_seconds, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            cancelled.cancel()
        if work in done:
            return work.result()
        work.cancel()
        # A caller that left, or a call past its budget: billable work may have happened.
        if pending.cancelled.is_set():
            return _Outcome(
                InvocationOutcome.CANCELLED, UsageStatus.UNKNOWN, error_kind="cancelled"
            )
        return _Outcome(InvocationOutcome.FAILED, UsageStatus.UNKNOWN, error_kind="timeout")

    async def _call(self, data: InvocationInput, pending: PendingCall, started: float) -> _Outcome:
        adapter = await self._adapters.get(data.targets[0])
        if data.operation is Operation.EMBED:
            return await self._embed(adapter, pending)
        if data.operation is Operation.RERANK:
            return await self._rerank(adapter, pending)
        request: ChatRequest = pending.request
        builder = CompletionBuilder()
        ttft: int | None = None
        emitted = False
        heartbeat = not activity.info().is_local
        try:
            async for event in adapter.stream(request):
                if ttft is None and isinstance(event, TextDelta | ToolCallDelta):
                    ttft = int((time.monotonic() - started) * 1000)
                    emitted = True
                builder.add(event)
                pending.events.put_nowait(event)
                if heartbeat:
                    activity.heartbeat()
            completion = builder.build()
        except ProviderError as exc:
            # Once output reached the caller the answer is Partial, never spliced or retried.
            return _Outcome(
                outcome=InvocationOutcome.PARTIAL if emitted else InvocationOutcome.FAILED,
                usage=UsageStatus.UNKNOWN,
                error_kind=exc.kind.value,
                provider_request_id=exc.provider_request_id,
                ttft_ms=ttft,
            )
        body = completion.model_dump(mode="json", exclude={"usage"})
        if completion.usage is not None:
            usage = UsageStatus.REPORTED
            tokens_in, tokens_out = completion.usage.input_tokens, completion.usage.output_tokens
            cached: int | None = completion.usage.cached_input_tokens
        else:
            usage = UsageStatus.ESTIMATED
            tokens_in = _estimate_tokens(json.dumps(request.model_dump(mode="json")))
            tokens_out = _estimate_tokens(completion.text + json.dumps(body["tool_calls"]))
            cached = None
        return _Outcome(
            outcome=InvocationOutcome.COMPLETED,
            usage=usage,
            input_tokens=tokens_in,
            output_tokens=tokens_out,
            cached=cached,
            artifact=canonical_json(body),
            provider_request_id=completion.provider_request_id,
            ttft_ms=ttft,
        )

    async def _embed(self, adapter: ProviderAdapter, pending: PendingCall) -> _Outcome:
        inputs: list[str] = pending.request
        try:
            result = await adapter.embed(inputs)
        except ProviderError as exc:
            return _Outcome(
                InvocationOutcome.FAILED, UsageStatus.UNKNOWN, error_kind=exc.kind.value
            )
        pending.events.put_nowait(result)
        tokens = result.input_tokens
        return _Outcome(
            outcome=InvocationOutcome.COMPLETED,
            usage=UsageStatus.REPORTED if tokens is not None else UsageStatus.ESTIMATED,
            input_tokens=tokens if tokens is not None else sum(map(_estimate_tokens, inputs)),
            output_tokens=0,
            artifact=canonical_json({"vectors": [list(v) for v in result.vectors]}),
            provider_request_id=result.provider_request_id,
        )

    async def _rerank(self, adapter: ProviderAdapter, pending: PendingCall) -> _Outcome:
        query, documents, top_n = pending.request
        try:
            result = await adapter.rerank(query, documents, top_n=top_n)
        except ProviderError as exc:
            return _Outcome(
                InvocationOutcome.FAILED, UsageStatus.UNKNOWN, error_kind=exc.kind.value
            )
        pending.events.put_nowait(result)
        tokens = result.input_tokens
        return _Outcome(
            outcome=InvocationOutcome.COMPLETED,
            usage=UsageStatus.REPORTED if tokens is not None else UsageStatus.ESTIMATED,
            input_tokens=tokens
            if tokens is not None
            else _estimate_tokens(query + "".join(documents)),
            output_tokens=0,
            artifact=canonical_json({"results": [r.model_dump() for r in result.results]}),
            provider_request_id=result.provider_request_id,
        )

    @activity.defn(name="close_abandoned_receipt")
    async def close_abandoned(self, data: InvocationInput) -> InvocationSummary:
        """The process that held the call is gone (or never ran it). A claimed receipt is closed
        Failed with usage Unknown: the provider may have done billable work. An unclaimed one
        means the provider was never called; its receipt says so with an estimate of zero."""
        summary = InvocationSummary(
            invocation_id=data.invocation_id,
            outcome=InvocationOutcome.FAILED,
            usage_status=UsageStatus.UNKNOWN,
            deployment_id=data.targets[0].deployment_id,
            error_kind="caller-lost",
        )
        if await receipts.claim(self._sessions, data, data.targets[0].deployment_id):
            summary.usage_status = UsageStatus.ESTIMATED
            summary.input_tokens = summary.output_tokens = 0
        await receipts.finalize(self._sessions, data.tenant_id, summary)
        return summary


def record_metrics(data: InvocationInput, provider: str, summary: InvocationSummary) -> None:
    """The spec's instruments, with ids and classes as dimensions (never content)."""
    outcome = summary.outcome.value if summary.outcome else "Unknown"
    metrics.invocations.add(
        1,
        {
            "tenant": data.tenant_id,
            "profile": data.profile_id,
            "provider": provider,
            "outcome": outcome,
        },
    )
    where = {"profile": data.profile_id, "provider": provider}
    if summary.time_to_first_token_ms is not None:
        metrics.latency.record(summary.time_to_first_token_ms / 1000, {**where, "phase": "ttft"})
    if summary.latency_ms is not None:
        metrics.latency.record(summary.latency_ms / 1000, {**where, "phase": "completion"})
    for direction, count in (("input", summary.input_tokens), ("output", summary.output_tokens)):
        if count:
            metrics.tokens.add(count, {"tenant": data.tenant_id, **where, "direction": direction})
    if summary.error_kind:
        metrics.provider_errors.add(1, {"provider": provider, "class": summary.error_kind})
    if summary.usage_status is UsageStatus.UNKNOWN:
        metrics.usage_unknown.add(1, {"provider": provider})
