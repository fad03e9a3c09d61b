"""How many of this process's answers may leave before Temporal has answered their workflows'
starts: a bounded lead instead of none.

A call begun alongside its start closes its receipt as it ends (invoke_close.py). What its
answer then waits for is only the start's reply: a start that fails after the call ended leaves
the receipt closed and the caller answered either way (`ReceiptCloser.close_late`,
tests/test_fault_temporal.py). So the wait decides no outcome; it is backpressure, keeping
Temporal's work in step with the answers. At one call at a time it was also the tail of the
calls: on the 2-core benchmark host of 2026-12-05 the slowest tenth of c=1 calls spent 17 ms
at the median between the receipt's close and the response, waiting on the start's reply,
against 3.5 ms for the faster half. A few answers may therefore go ahead of their starts'
replies; past that lead each waits again, so a burst never runs more than the lead ahead of
Temporal.
"""

from __future__ import annotations

import asyncio


class AnswersAhead:
    """Counts the answers handed over while their starts were unanswered, up to `limit`
    (0: every answer waits for its start)."""

    __slots__ = ("_ahead", "_limit")

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._ahead = 0

    @property
    def ahead(self) -> int:
        return self._ahead

    def take(self, started: asyncio.Future[bool] | None) -> bool:
        """Whether an answer may go now: its start answered already (or none to wait for), or
        a place in the lead is free, held until the start is answered, accepted or refused."""
        if started is None or started.done():
            return True
        if self._ahead >= self._limit:
            return False
        self._ahead += 1
        started.add_done_callback(self._back)
        return True

    def _back(self, _: asyncio.Future[bool]) -> None:
        self._ahead -= 1
