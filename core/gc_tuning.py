"""The API process's garbage collector, set for a long-running server.

Measured in the API process over one `bench/bench_invoke.py --quick` run (2026-12-01, gc
callbacks timing each collection): 0.73 s of its 8.6 CPU seconds went to the collector (8.5 %)
— 348 young collections (0.11 s), 32 middle (0.07 s), and 2 full ones of about 270 ms each,
which stop the event loop, so every stream in flight stalls for as long (the 64-stream row's
gaps over 250 ms). Nearly all of what a full collection walks was made at start-up and lives as
long as the process (modules, the SDKs' types, the Temporal protos, the catalog snapshot):
`gc.freeze()` moves it out of the collector's reach. A call allocates thousands of short-lived
objects, so the young threshold goes from 700 to 10,000. With both, the same run spent 0.09 s
after start-up (14 young, 1 middle, no full collection), plus one collection at start-up.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 10_000


def settle() -> None:
    """Once the process has started, before it serves: collect what start-up left behind,
    then freeze the rest."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
