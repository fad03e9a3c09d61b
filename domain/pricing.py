"""Pricebooks and cost estimates, shared by the planner (cost term, budget filter) and the
invoke path (receipt estimates).

Money is Decimal: receipts and budgets must add up exactly. The planner only needs ratios, so
it converts to float once, when a snapshot is compiled.
"""

from __future__ import annotations

from bisect import bisect_right
from datetime import date
from decimal import ROUND_CEILING, ROUND_HALF_UP, Decimal
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from domain.amounts import PlainDecimal
from domain.deployments import PROVIDER_NAME

TOKENS_PER_PRICE_UNIT = Decimal(1_000_000)
COST_QUANTUM = Decimal("1e-8")  # a receipt's cost, NUMERIC(18, 8), holds eight decimals
COST_MAX = Decimal("9999999999.99999999")  # and ten digits before them

# What a published revision may hold, so that it is stored exactly as published: a price is
# NUMERIC(18, 8) in the store (up to 9,999,999,999.99999999 USD per million tokens, to a
# hundred-millionth), and the names fit their columns. PostgreSQL refused a larger value
# (the API answered 503) and rounded a ninth decimal, so a republished revision read back
# different from itself (409).
PRICE_MAX_DIGITS = 18
PRICE_DECIMAL_PLACES = 8
REVISION_MAX_LENGTH = 100
PROVIDER_MAX_LENGTH = 64
MODEL_MAX_LENGTH = 200
# Fixed-point in JSON (domain/amounts.py): a published 0.00000001 read back as `1E-8`.
Price = Annotated[
    PlainDecimal, Field(ge=0, max_digits=PRICE_MAX_DIGITS, decimal_places=PRICE_DECIMAL_PLACES)
]


class PriceEntry(BaseModel):
    """USD per million tokens for one provider model, from `effective_from` until superseded."""

    model_config = ConfigDict(
        frozen=True, validate_by_name=True, validate_by_alias=True, extra="forbid"
    )

    # A deployment's provider name, or the price matches no deployment (nor any receipt).
    provider: str = Field(pattern=PROVIDER_NAME)
    model: str = Field(min_length=1, max_length=MODEL_MAX_LENGTH)
    input_usd_per_mtok: Price = Field(alias="inputUsdPerMtok")
    output_usd_per_mtok: Price = Field(alias="outputUsdPerMtok")
    # None: the provider has no cache discount, so cached input bills at the input price.
    cached_input_usd_per_mtok: Price | None = Field(default=None, alias="cachedInputUsdPerMtok")
    # Input written to the provider's prompt cache, which Anthropic bills above input (1.25
    # times for its 5-minute breakpoints, 2 times for 1-hour ones). None: at the input price.
    cache_write_usd_per_mtok: Price | None = Field(default=None, alias="cacheWriteUsdPerMtok")
    effective_from: date = Field(alias="effectiveFrom")

    @property
    def key(self) -> tuple[str, str]:
        return (self.provider, self.model)


class Pricebook(BaseModel):
    """One pricing revision. Entries for the same model with later `effective_from` dates are
    announced price changes, so a revision can be published before the prices it holds apply."""

    model_config = ConfigDict(
        frozen=True, validate_by_name=True, validate_by_alias=True, extra="forbid"
    )

    revision: str = Field(min_length=1, max_length=REVISION_MAX_LENGTH)
    entries: tuple[PriceEntry, ...] = ()

    _index: dict[tuple[str, str], tuple[list[int], list[PriceEntry]]] = PrivateAttr(
        default_factory=dict
    )

    @model_validator(mode="after")
    def _one_price_per_day(self) -> Pricebook:
        seen: set[tuple[str, str, date]] = set()
        for e in self.entries:
            k = (e.provider, e.model, e.effective_from)
            if k in seen:
                raise ValueError(
                    f"pricebook {self.revision}: two prices for {e.provider}/{e.model} "
                    f"effective {e.effective_from.isoformat()}"
                )
            seen.add(k)
        return self

    def model_post_init(self, _context: object) -> None:
        grouped: dict[tuple[str, str], list[PriceEntry]] = {}
        for e in self.entries:
            grouped.setdefault(e.key, []).append(e)
        for key, items in grouped.items():
            items.sort(key=lambda e: e.effective_from)
            self._index[key] = ([e.effective_from.toordinal() for e in items], items)

    def price_for(self, provider: str, model: str, on: date) -> PriceEntry | None:
        """The price in force on `on`, or None when the model has no price yet (or at all)."""
        found = self._index.get((provider, model))
        if found is None:
            return None
        starts, items = found
        i = bisect_right(starts, on.toordinal()) - 1
        return items[i] if i >= 0 else None

    def history(self, provider: str, model: str) -> tuple[PriceEntry, ...]:
        """Every price of one model in this revision, oldest first."""
        found = self._index.get((provider, model))
        return tuple(found[1]) if found else ()


def _write_price(price: PriceEntry) -> Decimal:
    written = price.cache_write_usd_per_mtok
    return written if written is not None else price.input_usd_per_mtok


def dearest_input_usd_per_mtok(price: PriceEntry) -> Decimal:
    """The most an input token may cost: input, or a cache write where that is dearer. A
    request's worst case prices its input here (budgets, and routing's cost scores alike)."""
    return max(price.input_usd_per_mtok, _write_price(price))


def _exact_cost_usd(
    price: PriceEntry,
    *,
    input_tokens: int,
    output_tokens: int,
    cached_input_tokens: int,
    cache_write_input_tokens: int = 0,
) -> Decimal:
    if min(input_tokens, output_tokens, cached_input_tokens, cache_write_input_tokens) < 0:
        raise ValueError("token counts cannot be negative")
    if cached_input_tokens + cache_write_input_tokens > input_tokens:
        raise ValueError("cache reads and writes are part of input tokens, so cannot exceed them")
    cached_price = (
        price.cached_input_usd_per_mtok
        if price.cached_input_usd_per_mtok is not None
        else price.input_usd_per_mtok
    )
    fresh = input_tokens - cached_input_tokens - cache_write_input_tokens
    total = (
        fresh * price.input_usd_per_mtok
        + cached_input_tokens * cached_price
        + cache_write_input_tokens * _write_price(price)
        + output_tokens * price.output_usd_per_mtok
    )
    return total / TOKENS_PER_PRICE_UNIT


def estimate_cost_usd(
    price: PriceEntry,
    *,
    input_tokens: int,
    output_tokens: int,
    cached_input_tokens: int = 0,
    cache_write_input_tokens: int = 0,
) -> Decimal:
    """Cost of known usage, to the receipt's precision. `cached_input_tokens` is the part of
    `input_tokens` served from the provider's prompt cache (OpenAI reports it that way; adapters
    normalise to it), `cache_write_input_tokens` the part written to it (Anthropic's
    `cache_creation_input_tokens`: billed at `cacheWriteUsdPerMtok`; it was billed as input,
    a quarter below the bill for a coding agent's growing history)."""
    exact = _exact_cost_usd(
        price,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cached_input_tokens=cached_input_tokens,
        cache_write_input_tokens=cache_write_input_tokens,
    )
    # Rounded here, as PostgreSQL's NUMERIC(18, 8) rounds it (half away from zero), so that the
    # receipt, its ModelInvoked event and every answer carry the same cost: 33 tokens at 0.075
    # USD per million are 0.000002475, stored as 0.00000248 while the event said 0.000002475.
    return exact.quantize(COST_QUANTUM, rounding=ROUND_HALF_UP)


def receipt_cost_usd(
    price: PriceEntry,
    *,
    input_tokens: int,
    output_tokens: int,
    cached_input_tokens: int = 0,
    cache_write_input_tokens: int = 0,
) -> Decimal | None:
    """The cost a receipt records: `estimate_cost_usd`, or None (unknown) past what the
    receipt's NUMERIC(18, 8) holds. Such a cost (1.5 million tokens at the largest price a
    revision holds come to 1.5e10 USD) made the receipt's close, or the reconciler's
    settlement, fail in the store on every retry, so the receipt stayed open (2026-12-04)."""
    cost = estimate_cost_usd(
        price,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cached_input_tokens=cached_input_tokens,
        cache_write_input_tokens=cache_write_input_tokens,
    )
    return cost if cost <= COST_MAX else None


def worst_case_cost_usd(
    price: PriceEntry, *, input_tokens_estimate: int, max_output_tokens: int
) -> Decimal:
    """What a request may cost at most: its input estimate with no cache hits (every token at
    the dearer of input and a cache write: either may be billed), plus the full output
    allowance. Budget reservations use this, so they never under-reserve: it is rounded up to
    the receipt's precision, never down."""
    writes_dearer = dearest_input_usd_per_mtok(price) > price.input_usd_per_mtok
    exact = _exact_cost_usd(
        price,
        input_tokens=input_tokens_estimate,
        output_tokens=max_output_tokens,
        cached_input_tokens=0,
        cache_write_input_tokens=input_tokens_estimate if writes_dearer else 0,
    )
    return exact.quantize(COST_QUANTUM, rounding=ROUND_CEILING)
