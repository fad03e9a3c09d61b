"""What a receipt can record of a provider's usage report.

A receipt's token columns are INTEGER, so a count is recordable when it is between 0 and
2^31 - 1. A report outside that cannot be true: a provider whose meter overflowed or
subtracted past zero. Such a report counts as no report: the receipt records our own estimate
(usage Estimated) and the reconciler settles it from the provider's statement. Recorded as
sent, it made the receipt's close fail in the store on every retry. The caller waited on that
close, and the receipt stayed open (2026-12-04, `tests/test_usage_reports.py`).
"""

from __future__ import annotations

TOKEN_COUNT_MAX = 2**31 - 1


def recordable(*counts: int | None) -> bool:
    """Whether every count given fits a receipt (None, not reported, always does)."""
    return all(c is None or 0 <= c <= TOKEN_COUNT_MAX for c in counts)
