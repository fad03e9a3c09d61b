"""The score candidates are ranked by, once the filters have run.

Every term is in [0, 1], higher is better, and the weights sum to 1, so a score is in [0, 1].

- capability: mean measured score over the profile's required capabilities. Thresholds are
  filters (a candidate under one never gets here), so this only ranks candidates that all
  passed; it cannot buy a failing candidate back in.
- cost: the profile's worst-case request priced for this candidate, as a log-ratio to the
  cheapest candidate of this decision: 1 / (1 + log2(cost / cheapest)). The cheapest scores 1,
  twice the price 0.5, four times 0.33. Computed per decision and never stored, so adding a
  deployment never rescales an earlier decision.
- latency: the same log-ratio over recent p95 latency (tail latency is what callers feel).
- history: recent success rate, smoothed towards neutral by HISTORY_PRIOR_ATTEMPTS pseudo-attempts
  so three lucky calls do not outrank three thousand good ones.

Missing statistics (no price and no budget, no latency samples, no attempts, no required
capabilities) score NEUTRAL: unknown is neither rewarded nor punished much.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from pydantic import BaseModel, ConfigDict, model_validator

NEUTRAL = 0.5
# A missing latency or price, in log2 space: it never becomes the cohort's best and scores
# NEUTRAL. A float rather than None keeps the planner's columns homogeneous and fast.
UNKNOWN = math.inf
HISTORY_PRIOR_ATTEMPTS = 10
# Prices and latencies are floored before taking logs: a free local model or a 0 ms probe would
# otherwise make every other candidate infinitely worse.
COST_FLOOR_USD = 1e-9
LATENCY_FLOOR_MS = 1.0
_WEIGHT_SUM_TOLERANCE = 1e-9


class Weights(BaseModel):
    """Scoring weights (setting ModelAccess:Routing:Weights). Validated, immutable, and passed to
    every decision, so reloading them is replacing one value; no restart, no shared state."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    capability: float = 0.5
    cost: float = 0.2
    latency: float = 0.2
    history: float = 0.1

    @model_validator(mode="after")
    def _a_convex_combination(self) -> Weights:
        values = self.as_tuple()
        for name, w in zip(("capability", "cost", "latency", "history"), values, strict=True):
            if not math.isfinite(w) or not 0.0 <= w <= 1.0:
                raise ValueError(f"weight {name} must be a number between 0 and 1, got {w!r}")
        total = math.fsum(values)
        if abs(total - 1.0) > _WEIGHT_SUM_TOLERANCE:
            raise ValueError(f"weights must sum to 1, got {total!r}")
        return self

    @classmethod
    def from_config(cls, raw: Mapping[str, object]) -> Weights:
        """From the setting's JSON; unknown keys are refused so a typo cannot zero a weight."""
        return cls.model_validate(raw)

    def as_tuple(self) -> tuple[float, float, float, float]:
        return (self.capability, self.cost, self.latency, self.history)


DEFAULT_WEIGHTS = Weights()


def capability_term(measured: Sequence[float]) -> float:
    if not measured:
        return NEUTRAL
    return math.fsum(measured) / len(measured)


def history_term(attempts: int, successes: int) -> float:
    k = HISTORY_PRIOR_ATTEMPTS
    return (successes + NEUTRAL * k) / (attempts + k)


def cost_log(cost_usd: float) -> float:
    return math.log2(max(cost_usd, COST_FLOOR_USD))


def latency_log(p95_ms: float) -> float:
    return math.log2(max(p95_ms, LATENCY_FLOOR_MS))


def ratio_term(log_value: float, log_best: float) -> float:
    """Log-ratio to the cohort's best, for values already in log2; UNKNOWN scores NEUTRAL."""
    return NEUTRAL if log_value == UNKNOWN else 1.0 / (1.0 + (log_value - log_best))


def ratio_terms(logs: Sequence[float]) -> list[float]:
    best = min(logs, default=UNKNOWN)
    return [ratio_term(x, best) for x in logs]


def combine(
    weights: Weights,
    capability: Sequence[float],
    cost: Sequence[float],
    latency: Sequence[float],
    history: Sequence[float],
) -> list[float]:
    wc, wk, wl, wh = weights.as_tuple()
    return [
        wc * a + wk * b + wl * c + wh * d
        for a, b, c, d in zip(capability, cost, latency, history, strict=True)
    ]
