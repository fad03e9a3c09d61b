"""What a receipt can record of what a provider reports: its usage and its request id.

A receipt's token columns are INTEGER, so a count is recordable when it is between 0 and
2^31 - 1. A report outside that cannot be true: a provider whose meter overflowed or
subtracted past zero. Such a report counts as no report: the receipt records our own estimate
(usage Estimated) and the reconciler settles it from the provider's statement.

A request id is recordable when it fits the receipt's VARCHAR(200). A longer one (a proxy in
front of the provider chaining its own id onto the provider's) is left out rather than cut: a
cut id would match no statement line, or the wrong one, and the reconciler falls back to the
statement's buckets as for a provider that sends no id.

Recorded as sent, either one made the receipt's close fail in the store on every retry. The
caller waited on that close, and the receipt stayed open (2026-12-04,
`tests/test_usage_reports.py`).
"""

from __future__ import annotations

TOKEN_COUNT_MAX = 2**31 - 1
REQUEST_ID_MAX_LENGTH = 200


def recordable(*counts: int | None) -> bool:
    """Whether every count given fits a receipt (None, not reported, always does)."""
    return all(c is None or 0 <= c <= TOKEN_COUNT_MAX for c in counts)


def recordable_request_id(request_id: str | None) -> str | None:
    """The provider's request id as a receipt records it: None when it does not fit."""
    if request_id is None or len(request_id) <= REQUEST_ID_MAX_LENGTH:
        return request_id
    return None
