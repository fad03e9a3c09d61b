"""A call with a budget is admitted only when its worst case fits: the input estimate plus the
output allowance, priced at the profile's pricing revision. Only the route's targets whose worst
case fits may answer it (a fallback too); with none, it is Denied (a receipt, a 402) before any
provider sees it: counted in `denials` and, as every receipt with its ModelInvoked is, in
`invocations` (outcome Denied)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from activities.invoke_outcomes import count_invocation
from api.problems import Problem
from core import metrics
from domain.enums import InvocationOutcome
from domain.hashing import canonical_json
from domain.invocation import InvocationInput, Operation, Target
from domain.pricing import worst_case_cost_usd
from store import pricebook, receipts
from store.receipt_statements import ReceiptStatements
from store.tables import InvocationReceiptRow

# What a budget's denial says it was: past the budget, or no price to judge it by.
OVER_BUDGET, NO_PRICE = "over-budget", "no-price"
BUDGET_REASONS = frozenset({OVER_BUDGET, NO_PRICE})


async def admit(
    sessions: async_sessionmaker[AsyncSession],
    statements: ReceiptStatements,
    data: InvocationInput,
    payload: dict[str, Any],
    budget_usd: Decimal,
    max_output_tokens: int | None,
) -> None:
    async with sessions() as session:
        book = await pricebook.load(session, data.tenant_id, data.pricing_revision)
    today, estimate = datetime.now(UTC).date(), max(1, len(canonical_json(payload)) // 4)
    # A chat with no output allowance is reserved 4,096 output tokens; an embedding or a
    # rerank produces none (its receipt records 0), and was reserved those 4,096 too: a
    # wrongful over-budget 402 for any priced with an output price.
    chat = data.operation is Operation.CHAT
    outputs = max_output_tokens if max_output_tokens is not None else (4096 if chat else 0)
    fitting: list[Target] = []
    refused: tuple[str, str] | None = None  # the first target's reason, should none fit
    for target in data.targets:
        price = book.price_for(target.provider, target.model, today) if book else None
        if price is None:
            said = f"{target.deployment_id} has no price in revision {data.pricing_revision}"
            refused = refused or (NO_PRICE, said)
            continue
        worst = worst_case_cost_usd(
            price, input_tokens_estimate=estimate, max_output_tokens=outputs
        )
        if worst <= budget_usd:
            fitting.append(target)
        else:
            said = f"worst case {worst:.6f} USD exceeds {budget_usd} USD"
            refused = refused or (OVER_BUDGET, said)
    if fitting:
        # Only these may answer. The first target alone was priced: a fallback (or a retry's
        # move to the next candidate) twenty times dearer answered within "the budget".
        if fitting[0] != data.targets[0] and data.primary_passed_over is None:
            # The plan's first is not called: the receipt's fallback and its ModelFallbackUsed
            # say why (they said nothing, the metric's reason "unknown").
            data.primary_passed_over = refused[0] if refused else OVER_BUDGET
        data.targets = fitting
        return
    reason, detail = refused or (NO_PRICE, f"no target in revision {data.pricing_revision}")
    summary = await statements.deny(data, reason)
    if summary is None:
        # The key was claimed before. Its own denial, sent again, is denied again; anything
        # else goes on to find the key used: its replay, or with another body its reuse (409),
        # as without a budget.
        async with sessions() as session:
            seen = await receipts.by_key(session, data.tenant_id, data.idempotency_key)
        if not _denied(seen, data.request_hash):
            return
    else:
        # Counted once, as its receipt is written: its key sent again is the same denial. It is
        # an invocation too (its receipt has its ModelInvoked), counted Denied as a close is.
        metrics.denials.add(1, {"tenant": data.tenant_id, "reason": reason})
        count_invocation(data, summary)
    raise denial(data.invocation_id, f"Denied: {detail}.", reason)


def denial(invocation_id: object, detail: str, reason: str | None) -> Problem:
    """The budget's 402, as the call was answered and as its key replays it."""
    return Problem(
        402,
        detail,
        type_="https://model-router.dev/problems/budget",
        reason=reason,
        receiptId=str(invocation_id),
        headers={"X-Model-Router-Receipt-Id": str(invocation_id)},
    )


def _denied(seen: InvocationReceiptRow | None, request_hash: str) -> bool:
    return (
        seen is not None
        and seen.outcome == InvocationOutcome.DENIED
        and seen.request_hash == request_hash
    )
