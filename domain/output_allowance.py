"""How many output tokens a call asks of its provider: the profile's maxOutputTokens is the
operator's limit on every answer, and the caller may ask for less, never more."""

from __future__ import annotations


def output_allowance(requested: int | None, profile_limit: int) -> int:
    """The cap sent to the provider: the caller's own when it is within the profile's limit,
    otherwise (asked for more, or for nothing) the profile's limit.

    A caller asking for more is capped rather than refused: agents send a fixed, model-sized
    `max_tokens` (Claude Code asks 32,000), and an answer cut at the limit is one they already
    handle (finish reason `length`, `max_tokens` on Messages). A caller asking for nothing is
    capped too, so that the budget's worst case (domain.pricing.worst_case_cost_usd, priced on
    this allowance) is a bound the answer keeps, on every provider alike."""
    return profile_limit if requested is None else min(requested, profile_limit)
