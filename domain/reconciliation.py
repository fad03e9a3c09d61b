"""Settling receipts from provider statements: the pure matching and allocation rules.

A receipt whose usage is Unknown or Estimated is settled by a statement in one of two ways:

1. **By provider request id.** A statement line that names the request id the receipt
   recorded settles that receipt with the line's tokens. Exact; tried first.
2. **By bucket allocation.** Usage APIs report tokens per (provider, model, key, time bucket),
   not per request. A bucket's *unexplained* tokens are its total minus the tokens of the
   receipts in the bucket whose usage is already known (Reported or Reconciled). They are
   shared among the bucket's unsettled receipts in proportion to each receipt's own estimate
   (an Estimated receipt's tokens; a receipt without one weighs the mean of the estimates, or
   1 when nobody has an estimate), separately for input and output tokens, by the largest
   remainder method so the shares add up exactly to the unexplained total; equal remainders go
   to the smaller invocation id. Cached input tokens (cache reads) are shared with the input
   weights and capped at each receipt's input share (cached tokens are part of the input);
   cache writes likewise, capped at the input share less the cached share.

A receipt belongs to a bucket when the provider matches, the statement's model is the
deployment's model or a dated snapshot of it (`gpt-4o` ~ `gpt-4o-2024-08-06`), the statement's
key (the endpointRef the provider key belongs to) is the deployment's or unstated, the tenant
matches (imported statements belong to their tenant; provider statements to everyone), and the
receipt started inside the bucket. Buckets are taken in time order, a tenant's own statements
before provider-wide ones; what one bucket settles counts as known usage for the next, which is
why running the rules again over the same statements settles nothing new.

A tenant's import never settles usage a provider-wide statement covers: such lines are left out
(`Plan.ignored_lines`; the rule, and why, in domain/statement_coverage.py).

Providers publish usage late, so a bucket is shared out only once it ended at least the settle
delay ago (`bucket_cutoff`); until then its receipts are skipped with `HELD`. A request-id line
is exact and settles at once, whatever the delay (a closed receipt: see below).

Nothing settles to zero unless asked for: a share of zero input and zero output tokens leaves
the receipt as it was (a statement that explains nothing is no proof that nothing was used).

A receipt that records that no provider saw the request — Estimated at our own count of zero
tokens: a denial, every candidate refused, credentials missing, a claim its process never called
with — takes no share of a bucket. Its tokens are known: none. (Before this rule, a bucket whose
only unsettled receipts were such zeros shared its unexplained tokens equally among them, so a
denied call could be billed for a health probe's or another client's tokens on the same key.)
It is skipped with `NOTHING_SENT`, or settled at zero when zeros are asked for.

A receipt still open (its call running, or its close waiting on the store) is never settled:
its usage is not final, and its close, which comes later, would write over the settlement. A
request-id line naming it waits (skipped with `OPEN`), and so does a bucket that holds it, whole:
the bucket's total includes the open call's tokens, which no share can stand for yet. (Before
this rule, a call running past the settle delay was settled, then its close wrote its own usage
over the settlement, and the next pass settled it again: two corrections of one receipt.)

Attempts that no receipt carries — one abandoned after a timeout or a cut and replaced by a
retry or a fallback (counted in the `attempts_abandoned` metric) — are not known here: a line
with such an attempt's request id matches no receipt and settles nothing, and in a bucket their
tokens are unexplained, so they go to the bucket's unsettled receipts, or to nobody.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from domain.allocation import allocate, allocate_capped, estimate_weights
from domain.enums import UsageStatus
from domain.provider_reports import recordable
from domain.statement_coverage import ProviderWide, reaches_provider_wide
from domain.statements import (
    AWAITING,
    ReceiptUsage,
    RequestIdCarrier,
    StatementLine,
    sent_nothing,
)

HELD = "bucket allocation waits for the settle delay (the bucket ended after the cutoff)"
ZERO_LINE = "the statement reports zero tokens"
NOTHING_LEFT = "no unexplained tokens left in the statement's bucket"
NOTHING_SENT = "the receipt records that no provider was called (our own count of zero)"
OPEN = "the receipt, or one in its statement's bucket, is still open (its usage not final)"
# A provider's hourly bucket for a key shared with traffic outside the gateway can hold more
# unexplained tokens than a receipt's INTEGER columns: settled, its write failed the whole pass,
# on every pass. The receipt waits for a statement it can hold (domain/provider_reports.py).
PAST_RECEIPT = "the statement's share is past what a receipt's token counts hold"
# A provider request id that more than one receipt carries (a self-hosted server numbering its
# requests from 1 again after a restart, two endpoints under one provider name): its line gave
# each of them its whole count, twice the bill. It names none of them; buckets may still.
SHARED_ID = "another receipt carries the same provider request id"


class Rule(StrEnum):
    REQUEST_ID = "provider-request-id"
    BUCKET = "bucket-allocation"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Settlement(_Frozen):
    invocation_id: str
    tenant_id: str
    statement_ref: str
    rule: Rule
    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)
    cached_input_tokens: int = Field(ge=0)
    # Of the input, the part written to the prompt cache: priced apart (cacheWriteUsdPerMtok).
    cache_write_input_tokens: int = Field(default=0, ge=0)


class Skipped(_Frozen):
    invocation_id: str
    statement_ref: str
    reason: str


class Plan(_Frozen):
    settlements: tuple[Settlement, ...] = ()
    skipped: tuple[Skipped, ...] = ()
    # Bucket tokens that no awaiting receipt could take (each is bounded by its model's context
    # window): someone's usage, but no receipt's.
    unattributed_input_tokens: int = 0
    unattributed_output_tokens: int = 0
    # Tenants' lines left out: they reach usage a provider-wide statement covers
    # (`reaches_provider_wide`), stored before the import endpoint refused them or by an API
    # process not configured with the source.
    ignored_lines: tuple[str, ...] = ()


_SNAPSHOT = re.compile(r"\d{4}-\d{2}-\d{2}|\d{8}")


def model_matches(statement_model: str, deployment_model: str) -> bool:
    if statement_model == deployment_model:
        return True
    prefix = deployment_model + "-"
    return statement_model.startswith(prefix) and bool(
        _SNAPSHOT.fullmatch(statement_model[len(prefix) :])
    )


_GroupKey = tuple[str, str | None, str, str, str | None, datetime, datetime]
# A receipt's usage as the rules count it: input, output, cache reads, cache writes.
_Usage = tuple[int, int, int, int]
_COUNTS = ("input_tokens", "output_tokens", "cached_input_tokens", "cache_write_input_tokens")


def _group_key(line: StatementLine) -> _GroupKey:
    assert line.model is not None and line.bucket_start is not None
    assert line.bucket_end is not None
    return (
        line.source,
        line.tenant_id,
        line.provider.lower(),
        line.model,
        line.key,
        line.bucket_start,
        line.bucket_end,
    )


def _order(key: _GroupKey) -> tuple[Any, ...]:
    source, tenant, provider, model, k, start, end = key
    return (start, end, provider, model, k or "", tenant is None, tenant or "", source)


def _belongs(key: _GroupKey, r: ReceiptUsage) -> bool:
    _, tenant, provider, model, k, start, end = key
    return (
        r.provider.lower() == provider
        and model_matches(model, r.model)
        and (k is None or k == r.key)
        and (tenant is None or tenant == r.tenant_id)
        and start <= r.started_at < end
    )


def _sent_nothing(r: ReceiptUsage) -> bool:
    return sent_nothing(r.usage_status, r.input_tokens, r.output_tokens, r.cached_input_tokens)


def group_ref(lines: Iterable[StatementLine]) -> str:
    refs = sorted(line.statement_ref for line in lines)
    return refs[0] if len(refs) == 1 else f"{refs[0]}+{len(refs) - 1}"


def known_writes(r: ReceiptUsage) -> int:
    """A known receipt's cache writes. One closed before receipts kept them (migration 0017)
    says none (null) though its input may hold some: counted as none, the bucket's writes it
    explains were handed to the receipts awaiting usage, priced at the write price above the
    bill (for the reconciler's lookback after the upgrade). Counted as all of its uncached input,
    the most it can hold, what is shared out is never dearer than the bill: at worst priced as
    input, as before. store/reconciliation.known_usage_in_window sums it the same way."""
    if r.cache_write_input_tokens is not None:
        return r.cache_write_input_tokens
    return max(0, (r.input_tokens or 0) - (r.cached_input_tokens or 0))


class _Ledger:
    """Receipts' current status and usage as the plan settles them."""

    def __init__(self, receipts: Iterable[ReceiptUsage]) -> None:
        self.receipts = sorted(receipts, key=lambda r: r.invocation_id)
        self.status = {r.invocation_id: r.usage_status for r in self.receipts}
        self.usage = {
            r.invocation_id: (
                r.input_tokens or 0,
                r.output_tokens or 0,
                r.cached_input_tokens or 0,
                known_writes(r) if r.usage_status not in AWAITING else 0,
            )
            for r in self.receipts
        }
        self.settlements: list[Settlement] = []
        self.skipped: list[Skipped] = []
        # Bucket tokens past every awaiting receipt's bound (`_allocate_group`).
        self.unattributed_input = 0
        self.unattributed_output = 0

    def awaiting(self, r: ReceiptUsage) -> bool:
        return self.status[r.invocation_id] in AWAITING

    def settle(self, r: ReceiptUsage, ref: str, rule: Rule, usage: _Usage) -> None:
        if not recordable(*usage):
            self.skip(r, ref, PAST_RECEIPT)
            return
        self.status[r.invocation_id] = UsageStatus.RECONCILED
        self.usage[r.invocation_id] = usage
        self.settlements.append(
            Settlement(
                invocation_id=r.invocation_id,
                tenant_id=r.tenant_id,
                statement_ref=ref,
                rule=rule,
                input_tokens=usage[0],
                output_tokens=usage[1],
                cached_input_tokens=usage[2],
                cache_write_input_tokens=usage[3],
            )
        )

    def skip(self, r: ReceiptUsage, ref: str, reason: str) -> None:
        self.skipped.append(
            Skipped(invocation_id=r.invocation_id, statement_ref=ref, reason=reason)
        )


def plan(
    lines: Iterable[StatementLine],
    receipts: Iterable[ReceiptUsage],
    *,
    settle_zero: bool = False,
    bucket_cutoff: datetime | None = None,
    carriers: Iterable[RequestIdCarrier] = (),
    provider_wide: ProviderWide | None = None,
) -> Plan:
    """What the statements settle. `receipts` must hold every awaiting receipt that a bucket of
    `lines` covers, and the known usage of the others, one by one or summed (a sum of one
    deployment's minute is one known receipt at the minute's start), or the unexplained tokens
    are miscounted. Buckets ending after
    `bucket_cutoff` are held back (their receipts skipped with HELD); None holds none.
    `carriers`: receipts besides `receipts` that carry a provider request id (settled on
    another day's window): a line naming their id names them too. `provider_wide`: the
    providers a provider-wide source reports; tenants' lines reaching them are left out."""
    ledger = _Ledger(receipts)
    by_request: dict[tuple[str, str], list[StatementLine]] = defaultdict(list)
    groups: dict[_GroupKey, list[StatementLine]] = defaultdict(list)
    ignored: list[str] = []
    for line in lines:
        if line.tenant_id is not None and reaches_provider_wide(
            provider_wide or {}, line.provider, line.key, line.provider_request_id is not None
        ):
            ignored.append(line.statement_ref)
        elif line.provider_request_id is not None:
            by_request[(line.provider.lower(), line.provider_request_id)].append(line)
        else:
            groups[_group_key(line)].append(line)

    carrying: dict[tuple[str, str], list[str]] = defaultdict(list)  # the tenants carrying each
    for r in ledger.receipts:
        if r.provider_request_id is not None:
            carrying[(r.provider.lower(), r.provider_request_id)].append(r.tenant_id)
    for c in carriers:
        carrying[(c.provider.lower(), c.request_id)].append(c.tenant_id)
    for r in ledger.receipts:
        if not ledger.awaiting(r) or r.provider_request_id is None:
            continue
        found = [
            line
            for line in by_request.get((r.provider.lower(), r.provider_request_id), [])
            if line.tenant_id in (None, r.tenant_id)
        ]
        if not found:
            continue
        line = min(found, key=lambda x: x.statement_ref)
        named = carrying[(r.provider.lower(), r.provider_request_id)]
        if sum(line.tenant_id in (None, tenant) for tenant in named) > 1:
            ledger.skip(r, line.statement_ref, SHARED_ID)
            continue
        if r.open:
            ledger.skip(r, line.statement_ref, OPEN)
            continue
        usage = (
            line.input_tokens,
            line.output_tokens,
            line.cached_input_tokens,
            line.cache_write_input_tokens,
        )
        if usage[0] + usage[1] == 0 and not settle_zero:
            ledger.skip(r, line.statement_ref, ZERO_LINE)
            continue
        ledger.settle(r, line.statement_ref, Rule.REQUEST_ID, usage)

    for key in sorted(groups, key=_order):
        if bucket_cutoff is not None and key[6] > bucket_cutoff:
            ref = group_ref(groups[key])
            for r in ledger.receipts:
                if ledger.awaiting(r) and _belongs(key, r):
                    ledger.skip(r, ref, HELD)
            continue
        if any(r.open for r in ledger.receipts if _belongs(key, r)):
            ref = group_ref(groups[key])
            for r in ledger.receipts:
                if ledger.awaiting(r) and _belongs(key, r):
                    ledger.skip(r, ref, OPEN)
            continue
        _allocate_group(ledger, key, groups[key], settle_zero)
    return Plan(
        settlements=tuple(ledger.settlements),
        skipped=tuple(ledger.skipped),
        unattributed_input_tokens=ledger.unattributed_input,
        unattributed_output_tokens=ledger.unattributed_output,
        ignored_lines=tuple(sorted(ignored)),
    )


def _allocate_group(
    ledger: _Ledger, key: _GroupKey, lines: list[StatementLine], settle_zero: bool
) -> None:
    members = [r for r in ledger.receipts if _belongs(key, r)]
    todo = [r for r in members if ledger.awaiting(r)]
    if not todo:
        return
    ref = group_ref(lines)
    for r in todo:
        if not _sent_nothing(r):
            continue
        if settle_zero:
            ledger.settle(r, ref, Rule.BUCKET, (0, 0, 0, 0))
        else:
            ledger.skip(r, ref, NOTHING_SENT)
    todo = [r for r in todo if not _sent_nothing(r)]
    if not todo:
        return
    known = [ledger.usage[r.invocation_id] for r in members if not ledger.awaiting(r)]
    unexplained = [
        max(0, sum(getattr(line, f) for line in lines) - sum(u[i] for u in known))
        for i, f in enumerate(_COUNTS)
    ]
    estimated = [r.usage_status is UsageStatus.ESTIMATED for r in todo]
    in_weights = estimate_weights(
        [r.input_tokens if est else None for r, est in zip(todo, estimated, strict=True)]
    )
    out_weights = estimate_weights(
        [r.output_tokens if est else None for r, est in zip(todo, estimated, strict=True)]
    )
    # No request takes in and gives out more than its model's context window, both together.
    # Uncapped, a bucket's tokens no receipt explains (health probes and evaluations write
    # none, nor do other users of a shared key) all went to the few receipts awaiting: one
    # timed-out call was settled at 30 million tokens of other traffic. What no share can take
    # is counted as unattributed, not charged to anyone.
    # The window is split between input and output as the bucket's tokens are: taken by input
    # first, a bucket full of others' input left the receipt's own output (the dearer tokens)
    # to nobody.
    windows = [r.context_window_tokens for r in todo]
    both = unexplained[0] + unexplained[1]
    in_caps = [None if w is None else w * unexplained[0] // max(both, 1) for w in windows]
    inputs = allocate_capped(unexplained[0], in_weights, in_caps)
    room = [None if w is None else w - i for w, i in zip(windows, inputs, strict=True)]
    outputs = allocate_capped(unexplained[1], out_weights, room)
    ledger.unattributed_input += unexplained[0] - sum(inputs)
    ledger.unattributed_output += unexplained[1] - sum(outputs)
    cached = [min(c, i) for c, i in zip(allocate(unexplained[2], in_weights), inputs, strict=True)]
    # Reads and writes are both part of the input: a write takes what the read left of it.
    written = [
        min(w, i - c)
        for w, i, c in zip(allocate(unexplained[3], in_weights), inputs, cached, strict=True)
    ]
    for r, i, o, c, w in zip(todo, inputs, outputs, cached, written, strict=True):
        if i + o == 0 and not settle_zero:
            ledger.skip(r, ref, NOTHING_LEFT)
            continue
        ledger.settle(r, ref, Rule.BUCKET, (i, o, c, w))
