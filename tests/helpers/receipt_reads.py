"""Counting the statements that read one key's receipt, on any engine in this process (the
in-process API's included): how a test tells how often a retry of that key went to the store."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, event


class ReceiptReads:
    """The SELECT statements whose parameters carry one idempotency key, while listening."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.seen = 0

    def __call__(self, conn: Any, cursor: Any, statement: str, params: Any, *_: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and self.key in repr(params):
            self.seen += 1


@contextmanager
def receipt_reads(key: str) -> Iterator[ReceiptReads]:
    reads = ReceiptReads(key)
    event.listen(Engine, "before_cursor_execute", reads)
    try:
        yield reads
    finally:
        event.remove(Engine, "before_cursor_execute", reads)
