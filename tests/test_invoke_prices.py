"""A receipt's cost comes from its invocation's pricing revision. A profile may name a revision
published after it: the process took that revision as missing for its whole life, and every
receipt went without a cost until a restart. A missing revision is read again after a while."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from activities.invoke_outcomes import Outcome
from activities.invoke_prices import MISSING_SECONDS, Prices
from domain.enums import InvocationOutcome, UsageStatus
from domain.invocation import InvocationInput
from domain.pricing import Pricebook, worst_case_cost_usd
from store import pricebook
from store.db import transaction


async def _published(
    sessions: async_sessionmaker[AsyncSession], tenant: str, revision: str, **entry: str
) -> Pricebook:
    """A revision of one price (`entry`: its fields; output 10 USD unless given), published."""
    book = Pricebook.model_validate(
        {
            "revision": revision,
            "entries": [
                {
                    "outputUsdPerMtok": "10",
                    "effectiveFrom": datetime(2026, 1, 1, tzinfo=UTC).date(),
                    **entry,
                }
            ],
        }
    )
    async with transaction(sessions) as session:
        assert await pricebook.publish(session, tenant, book)
    return book


async def test_a_revision_published_after_it_was_missing_prices_later_calls(
    sessions: async_sessionmaker[AsyncSession], tenant: str
) -> None:
    now = [1000.0]
    prices = Prices(sessions, clock=lambda: now[0])
    # Of the call, only its tenant and revision are read here.
    call = InvocationInput.model_construct(tenant_id=tenant, pricing_revision="later")  # type: ignore[call-arg]
    answered = Outcome(
        outcome=InvocationOutcome.COMPLETED,
        usage=UsageStatus.REPORTED,
        input_tokens=1_000_000,
        output_tokens=0,
    )
    assert await prices.cost(call, "openai", "gpt-4.1", answered) is None  # not published yet

    await _published(
        sessions, tenant, "later", provider="openai", model="gpt-4.1", inputUsdPerMtok="2.5"
    )
    # Within the while, the miss stands (no read per call); past it, the revision is read.
    now[0] += MISSING_SECONDS - 1
    assert await prices.cost(call, "openai", "gpt-4.1", answered) is None
    now[0] += 1
    assert await prices.cost(call, "openai", "gpt-4.1", answered) == Decimal("2.5")


async def test_input_written_to_the_prompt_cache_is_priced_at_the_write_price(
    sessions: async_sessionmaker[AsyncSession], tenant: str
) -> None:
    """Anthropic bills a cache write above input (1.25 times for 5-minute breakpoints); it was
    priced as input. Budgets reserve every input token at the dearer of the two."""
    book = await _published(
        sessions,
        tenant,
        "writes",
        provider="anthropic",
        model="claude-sonnet",
        inputUsdPerMtok="3",
        cachedInputUsdPerMtok="0.3",
        cacheWriteUsdPerMtok="3.75",
        outputUsdPerMtok="15",
    )
    call = InvocationInput.model_construct(tenant_id=tenant, pricing_revision="writes")  # type: ignore[call-arg]
    answered = Outcome(
        outcome=InvocationOutcome.COMPLETED,
        usage=UsageStatus.REPORTED,
        input_tokens=1_000_000,
        cached=200_000,
        cache_written=400_000,
        output_tokens=100_000,
    )
    # 400k fresh at 3, 200k read at 0.3, 400k written at 3.75, 100k out at 15.
    cost = await Prices(sessions).cost(call, "anthropic", "claude-sonnet", answered)
    assert cost == Decimal("1.2") + Decimal("0.06") + Decimal("1.5") + Decimal("1.5")
    [price] = book.entries
    assert worst_case_cost_usd(price, input_tokens_estimate=1_000_000, max_output_tokens=0) == (
        Decimal("3.75")
    )


async def test_a_call_is_priced_on_the_day_it_was_claimed(
    sessions: async_sessionmaker[AsyncSession], tenant: str
) -> None:
    """A call claimed before a new price took effect and ended after it was recorded at the new
    price, though admitted at the old one and reconciled (by its start) at the old one too."""
    today = datetime.now(UTC).date()
    book = Pricebook.model_validate(
        {
            "revision": "dated",
            "entries": [
                {
                    "provider": "openai",
                    "model": "gpt-4.1",
                    "inputUsdPerMtok": price,
                    "outputUsdPerMtok": "10",
                    "effectiveFrom": day,
                }
                for price, day in (("2", datetime(2026, 1, 1, tzinfo=UTC).date()), ("5", today))
            ],
        }
    )
    async with transaction(sessions) as session:
        assert await pricebook.publish(session, tenant, book)
    answered = Outcome(
        outcome=InvocationOutcome.COMPLETED,
        usage=UsageStatus.REPORTED,
        input_tokens=1_000_000,
        output_tokens=0,
    )
    for claimed, price in ((datetime.now(UTC) - timedelta(days=1), "2"), (datetime.now(UTC), "5")):
        call = InvocationInput.model_construct(  # type: ignore[call-arg]
            tenant_id=tenant, pricing_revision="dated", claimed_at=claimed
        )
        assert await Prices(sessions).cost(call, "openai", "gpt-4.1", answered) == Decimal(price)
