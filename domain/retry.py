"""When to try the same deployment again: only transient failures, with exponential backoff
and full jitter, honouring a provider's Retry-After only within a bound. Pure: the random draw
is passed in, so a test can pin it."""

from __future__ import annotations

from dataclasses import dataclass

# A silent provider is not retried on the same route: its next attempt would wait as long
# again, multiplying the caller's wait. The next candidate gets the chance instead.
_NO_SAME_ROUTE_RETRY = frozenset({"timeout"})
# Non-transient kinds move on (context length, quota, auth: domain/fallback.py) or stop
# (policy, invalid request); they never repeat the same request against the same deployment.
# So does a request larger than a deployment's whole tokens-per-minute limit, which no wait
# lets through: providers/errors.py reads it as quota, not as the rate limit its 429 says.


@dataclass(frozen=True)
class RetryRules:
    max_attempts: int = 3  # per deployment, the first attempt included
    base_delay: float = 0.2
    max_delay: float = 2.0
    # A Retry-After longer than this is not waited for: the next candidate is tried, or the
    # caller is told to come back.
    max_retry_after: float = 5.0


def retry_delay(
    rules: RetryRules,
    attempt: int,
    kind: str,
    transient: bool,
    retry_after: float | None,
    draw: float,
    remaining: float,
) -> float | None:
    """Seconds to wait before attempt `attempt + 1` on the same deployment, or None when the
    same deployment must not be tried again. `attempt` counts from 1; `draw` is in [0, 1);
    `remaining` is what is left of the call's budget."""
    if not transient or kind in _NO_SAME_ROUTE_RETRY or attempt >= rules.max_attempts:
        return None
    if retry_after is not None:
        if retry_after > rules.max_retry_after:
            return None
        delay = retry_after
    else:
        ceiling = min(rules.max_delay, rules.base_delay * 2 ** (attempt - 1))
        # Full jitter, but never a tight loop: at least half the step.
        delay = ceiling * (0.5 + draw / 2)
    if delay >= remaining:
        return None
    return delay
