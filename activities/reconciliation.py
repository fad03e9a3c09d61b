"""Receipt reconciler activities: fetch provider statements into the store, settle one day of
receipts from the stored statements (pure rules in `domain.reconciliation`), and recount the
receipts still waiting for the usage_unknown gauge (counting, beside it, what the run could not
do). A settled receipt's tokens are added to `tokens`, which its close could not count."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Callable
from datetime import timedelta
from functools import partial

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.invoke_outcomes import count_tokens
from activities.provider_wide import provider_wide
from activities.reconciliation_types import (
    SOURCE_REFUSED,
    FetchInput,
    FetchResult,
    GaugeInput,
    WindowInput,
    WindowResult,
)
from core import metrics
from core.settings import Settings
from domain.reconciliation import Rule, Settlement, plan
from providers.secrets import Connection, SecretBroker, SecretResolutionError
from providers.statements.anthropic_usage import AnthropicUsageSource
from providers.statements.base import StatementSource, StatementSourceError
from providers.statements.openai_usage import OpenAIUsageSource
from store import reconciliation, statements
from store.db import transaction
from store.reconciliation import ReceiptInWindow
from store.usage_gauge import recount_usage_unknown

_Factory = Callable[[Connection], StatementSource]
log = logging.getLogger("model_router.reconciler")


class ReconciliationActivities:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        settings: Settings,
        broker: SecretBroker,
        http: httpx.AsyncClient,
    ) -> None:
        self._sessions = sessions
        self._broker = broker
        # How far either side of a day a receipt carrying one of its request ids is looked for.
        self._lookback = timedelta(hours=settings.reconciler_lookback_hours)
        self._sources: dict[str, tuple[str, _Factory]] = {}
        if settings.statements_openai_admin_ref:
            openai_keys = settings.statements_openai_key_refs
            self._sources[OpenAIUsageSource.name] = (
                settings.statements_openai_admin_ref,
                lambda c: OpenAIUsageSource(http, c, openai_keys),
            )
        if settings.statements_anthropic_admin_ref:
            anthropic_keys = settings.statements_anthropic_key_refs
            self._sources[AnthropicUsageSource.name] = (
                settings.statements_anthropic_admin_ref,
                lambda c: AnthropicUsageSource(http, c, anthropic_keys),
            )
        # What those sources report: a tenant's imported line reaching it is left out
        # (domain/statement_coverage.py; the import endpoint refuses them).
        self._provider_wide = provider_wide(settings)

    @activity.defn(name="reconcile_sources")
    async def sources(self) -> list[str]:
        return sorted(self._sources)

    @activity.defn(name="reconcile_fetch")
    async def fetch(self, data: FetchInput) -> FetchResult:
        """Reads one provider's statement for [start, end) and stores its lines. Transient
        failures raise a retryable error (the workflow backs off exponentially); a refused
        credential or request stops the retries for this run."""
        configured = self._sources.get(data.source)
        if configured is None:
            raise ApplicationError(
                f"statement source {data.source} is not configured on this worker",
                type=SOURCE_REFUSED,
                non_retryable=True,
            )
        ref, factory = configured
        try:
            source = factory(await self._broker.resolve(ref))
            lines = await source.fetch(data.start, data.end, data.bucket_width)
        except SecretResolutionError as exc:
            raise ApplicationError(str(exc), type=SOURCE_REFUSED, non_retryable=True) from None
        except StatementSourceError as exc:
            raise ApplicationError(
                str(exc),
                type=SOURCE_REFUSED if not exc.transient else "StatementSourceUnavailable",
                non_retryable=not exc.transient,
            ) from None
        async with transaction(self._sessions) as session:
            await statements.upsert_lines(session, lines)
        return FetchResult(source=data.source, lines=len(lines))

    @activity.defn(name="reconcile_window")
    async def window(self, data: WindowInput) -> WindowResult:
        async with self._sessions() as session:
            pending = await reconciliation.receipts_in_window(
                session,
                start=data.start,
                end=data.end,
                tenant_ids=data.tenant_ids,
                awaiting_only=True,
            )
            if not pending:
                return WindowResult()
            # Every tenant's known usage, whatever tenants the run is narrowed to: it explains
            # part of a provider-wide bucket (store/reconciliation.known_usage_in_window).
            known = await reconciliation.known_usage_in_window(
                session, start=data.start, end=data.end
            )
            lines = await statements.lines_for(
                session,
                providers={r.usage.provider for r in pending},
                tenants={r.usage.tenant_id for r in pending},
                start=data.start,
                end=data.end,
                request_ids={
                    r.usage.provider_request_id for r in pending if r.usage.provider_request_id
                },
            )
            named = {line.provider_request_id for line in lines if line.provider_request_id}
            carriers = await reconciliation.request_id_carriers(
                session,
                # The lookback either side: a receipt a day ago may have settled on this id.
                start=data.start - self._lookback,
                end=data.end + self._lookback,
                request_ids=sorted(named),
                pending=[r.usage.invocation_id for r in pending],
            )
        # On a thread: the matching walks every receipt of the day per statement bucket, seconds
        # of CPU on a busy day, and on the loop it held the worker's other activities (probes
        # timing themselves, webhook posts, heartbeats, the closes of calls whose API died).
        outcome = await asyncio.to_thread(
            partial(
                plan,
                lines,
                [*(r.usage for r in pending), *known],
                settle_zero=data.settle_zero_usage,
                bucket_cutoff=data.bucket_cutoff,
                carriers=carriers,
                provider_wide=self._provider_wide,
            )
        )
        if outcome.ignored_lines:
            log.warning(
                "%d imported statement line(s) left out: they name usage a provider-wide "
                "statement reports (%s%s)",
                len(outcome.ignored_lines),
                ", ".join(outcome.ignored_lines[:5]),
                ", …" if len(outcome.ignored_lines) > 5 else "",
            )
        by_id = {r.usage.invocation_id: r for r in pending}
        by_statement = defaultdict(list)
        for settlement in outcome.settlements:
            by_statement[settlement.statement_ref].append(settlement)
        result = WindowResult(
            pending=len(pending),
            skipped=len(outcome.skipped),
            unattributed_input_tokens=outcome.unattributed_input_tokens,
            unattributed_output_tokens=outcome.unattributed_output_tokens,
        )
        reason_of: dict[str, str] = {}
        for skip in outcome.skipped:
            reason_of.setdefault(skip.invocation_id, skip.reason)
        for reason in reason_of.values():
            result.skipped_reasons[reason] = result.skipped_reasons.get(reason, 0) + 1
        touched = set(reason_of) | {s.invocation_id for s in outcome.settlements}
        result.unmatched = sum(1 for r in pending if r.usage.invocation_id not in touched)
        pricing = reconciliation.Pricing()
        # One transaction per statement bucket: its shares land together or not at all.
        for ref in sorted(by_statement):
            landed: list[tuple[ReceiptInWindow, Settlement]] = []
            async with transaction(self._sessions) as session:
                for settlement in by_statement[ref]:
                    receipt = by_id[settlement.invocation_id]
                    cost = await pricing.cost(session, receipt, settlement)
                    if not await reconciliation.settle(session, receipt, settlement, cost):
                        continue  # settled meanwhile: counted by the run that settled it
                    landed.append((receipt, settlement))
            # Counted once committed: a bucket whose commit failed is settled again on the
            # retry, and was counted twice.
            for receipt, settlement in landed:
                rule = settlement.rule.value
                result.settled += 1
                if rule == Rule.REQUEST_ID.value:
                    result.by_request_id += 1
                metrics.receipts_reconciled.add(
                    1, {"provider": receipt.usage.provider, "rule": rule}
                )
                _count_settled_tokens(receipt, settlement)
        for direction, count in (
            ("input", outcome.unattributed_input_tokens),
            ("output", outcome.unattributed_output_tokens),
        ):
            if count:
                metrics.reconcile_unattributed_tokens.add(count, {"direction": direction})
        return result

    @activity.defn(name="reconcile_gauge")
    async def gauge(self, data: GaugeInput | None = None) -> dict[str, int]:
        counts = await recount_usage_unknown(self._sessions, self._lookback.total_seconds() / 3600)
        # Counted once the recount is in, so that a retry of it does not count them again.
        # None from a run scheduled before the input existed (its history has no argument).
        if data is not None:
            metrics.reconcile_windows_failed.add(data.failed_windows)
            for source in data.failed_sources:
                metrics.reconcile_sources_failed.add(1, {"source": source})
        return counts


def _count_settled_tokens(receipt: ReceiptInWindow, settlement: Settlement) -> None:
    """A settled receipt's tokens in `tokens`, under the series its close counted in. Its close
    counted what the receipt then held: nothing for usage Unknown, our own count for Estimated.
    So what is added is the settlement past that count, per direction: the counter then holds
    the statement's figure (or the estimate, where that was more: a counter cannot go back)."""
    row = receipt.row
    count_tokens(
        row.tenant_id,
        row.profile_id,
        receipt.usage.provider,
        settlement.input_tokens - (row.input_tokens or 0),
        settlement.output_tokens - (row.output_tokens or 0),
    )
