"""What a receipt can record of what a provider reports: its usage and its request id.

A receipt's token columns are INTEGER, so a count is recordable when it is between 0 and
2^31 - 1. A report outside that cannot be true: a provider whose meter overflowed or
subtracted past zero. Such a report counts as no report: the receipt records our own estimate
(usage Estimated) and the reconciler settles it from the provider's statement.

A figure that is not a whole JSON number (12.5, "12") is no count either, and its report no
report (read at the adapter boundary, providers/usage_figures.py).

A request id is recordable when it fits the receipt's VARCHAR(200). A longer one (a proxy in
front of the provider chaining its own id onto the provider's) is left out rather than cut: a
cut id would match no statement line, or the wrong one, and the reconciler falls back to the
statement's buckets as for a provider that sends no id.

Recorded as sent, a count or an id past its column made the receipt's close fail in the store
on every retry. The caller waited on that close, and the receipt stayed open (2026-12-04,
`tests/test_usage_reports.py`).
"""

from __future__ import annotations

from domain.enums import UsageStatus
from domain.invocation import InvocationSummary

TOKEN_COUNT_MAX = 2**31 - 1
REQUEST_ID_MAX_LENGTH = 200


def token_count(figure: object) -> int | None:
    """The count a usage figure states: a whole JSON number (12, or 12.0 as some servers write
    it). Anything else (12.5, "12", true, an object) states none, and a report with such a
    figure counts as no report, as one past what a receipt holds does."""
    if isinstance(figure, bool):
        return None
    if isinstance(figure, int):
        return figure
    if isinstance(figure, float) and figure.is_integer():
        return int(figure)
    return None


def recordable(*counts: int | None) -> bool:
    """Whether every count given fits a receipt (None, not reported, always does)."""
    return all(c is None or 0 <= c <= TOKEN_COUNT_MAX for c in counts)


def recordable_request_id(request_id: str | None) -> str | None:
    """The provider's request id as a receipt records it: None when it does not fit."""
    if request_id is None or len(request_id) <= REQUEST_ID_MAX_LENGTH:
        return request_id
    return None


def without_reports(summary: InvocationSummary) -> InvocationSummary:
    """The close of a call without what its provider reported: usage Unknown, and no counts,
    cost or request id. What the gateway saw itself stays: the outcome, who answered, how long
    it took, the answer's file. Written when the store refused the whole close for its values,
    not for being away, from a cause the rules above do not yet know: refused as it was, it
    would be refused on every retry, the receipt open for good. The reconciler settles its
    usage from the provider's statement."""
    return summary.model_copy(
        update={
            "usage_status": UsageStatus.UNKNOWN,
            "input_tokens": None,
            "output_tokens": None,
            "cached_input_tokens": None,
            "cache_write_input_tokens": None,
            "estimated_cost_usd": None,
            "provider_request_id": None,
        }
    )
