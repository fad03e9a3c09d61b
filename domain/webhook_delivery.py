"""When a webhook receiver that keeps failing has its subscription ended.

Every failed delivery is retried, in order, for as long as the receiver fails (a receiver that
answers 4xx today may be fixed tomorrow). But a receiver decommissioned without a 410 (a 404, a
host that no longer resolves) was retried for ever: its subscription, still active, held back
every run event of its tenant from the retention prune (some 4 million rows a day at 50
calls/s), and nobody was told. As Standard Webhooks senders do, a streak of failures longer
than the setting ends the subscription, as a 410 does; its last error says why.
"""

from __future__ import annotations

from datetime import datetime, timedelta


def failing_too_long(failing_since: datetime | None, now: datetime, hours: int) -> bool:
    """Whether a receiver failing since `failing_since` has failed for `hours` (0: never)."""
    if hours <= 0 or failing_since is None:
        return False
    return now - failing_since >= timedelta(hours=hours)
