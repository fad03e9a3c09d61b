"""A provider's usage figures read at the adapter boundary, as the counts they state.

A figure that states no count (12.5, "12", true: domain/provider_reports.py) makes its whole
report no report, as a provider that sends no usage: the receipt records our own estimate and
the reconciler settles it from the provider's statement. Read as given, a fraction failed the
usage event's validation once the answer was in, as a malformed stream: a JSON caller's call
was tried three times, each one paid, and answered 503; a streaming caller got the answer's
text and then an error (2026-12-04, `tests/test_usage_reports.py`). A numeric string ("12")
was taken as its number; it is now no count, as any figure the protocol does not write.
"""

from __future__ import annotations

import logging

from domain.provider_reports import token_count

log = logging.getLogger("model_router.providers")


def counts(*figures: object) -> tuple[int, ...] | None:
    """The counts the figures state, or None (logged, never content) when one states none."""
    found = tuple(token_count(figure) for figure in figures)
    if any(count is None for count in found):
        log.warning("provider usage report with a figure that is not a count, left out")
        return None
    return tuple(count for count in found if count is not None)


def count(figure: object) -> int | None:
    """The count one figure states; None when it is absent or states none (logged)."""
    if figure is None:
        return None
    found = counts(figure)
    return found[0] if found else None
