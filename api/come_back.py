"""The `Retry-After` of a 503: when a candidate of the call may next be tried, as this process
knows it, never a fixed guess. At least a second (a header counts whole seconds, and an
immediate retry is what the caller would do anyway), at most the configured cap."""

from __future__ import annotations

import math
from collections.abc import Iterable

from activities.breaker_recovery import BreakerRecovery
from activities.resilience import BreakerRegistry


class ComeBack:
    def __init__(
        self, breakers: BreakerRegistry, recovery: BreakerRecovery | None, cap_seconds: int
    ) -> None:
        self._breakers, self._recovery, self._cap = breakers, recovery, cap_seconds

    def after_failure(self, tenant_id: str, deployment_ids: Iterable[str]) -> int:
        """Every candidate failed or was refused by its breaker: the earliest end of a
        candidate's cool-down or of the Retry-After its provider gave (now, for a candidate
        whose breaker is closed and whose provider named no time)."""
        return self._seconds(self._breakers.wait(tenant_id, deployment_ids))

    def none_routable(self, tenant_id: str, deployment_ids: Iterable[str]) -> int:
        """No candidate is Approved and healthy. If this process is trialling one it reported
        Degraded, its next trial; otherwise the health probe decides, on a schedule this process
        does not read, and the cap is all that can be said."""
        found = self._recovery.next_trial_in(tenant_id, deployment_ids) if self._recovery else None
        return self._seconds(found)

    def _seconds(self, seconds: float | None) -> int:
        if seconds is None:
            return self._cap
        return min(self._cap, max(1, math.ceil(seconds)))
