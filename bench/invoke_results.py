"""What a run of the invoke benchmark measured, and the statistics over it: percentiles (and how
they print), and the runs of each path and scenario merged over rounds."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bench.invoke_ceiling import Ceiling
from bench.invoke_config import SCENARIOS
from bench.invoke_load import Run
from bench.invoke_receipts import ReceiptCheck

# The probes (bench/invoke_probes.py) of the routing reads before a call, and of every database
# step of a call, in the order they are added up.
# The database steps of a call without a budget on a held snapshot: the claim (with its catalog
# version check) and the finalize; the idempotency lookup runs only on a used key.
DB_STEPS = ("db_claim", "db_finalize")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def f1(x: float) -> str:
    return "—" if x != x else f"{x:.1f}"  # NaN check


def f2(x: float) -> str:
    return "—" if x != x else f"{x:.2f}"


def probe_p50(probes: dict[str, list[float]], name: str) -> float:
    """Median of one probe's timings, in ms."""
    return pct([x * 1000 for x in probes.get(name, [])], 0.5)


@dataclass
class Results:
    runs: list[Run]
    paths: list[str]
    probes: dict[str, list[float]]
    receipts: ReceiptCheck
    pg: dict[str, Any] | None
    temporal_per_call: dict[str, float]
    pg_connections_per_call: dict[str, float]  # scenario -> new PostgreSQL sessions per call
    extra: list[str]  # the --workers 2 and 64-stream rows, as docs lines
    ceiling: Ceiling  # InvokeModel alone at c=16, nothing else per invocation
    rss: dict[str, tuple[int, int, int, int]]  # name -> first, peak, last, hwm (KiB)
    load_start: tuple[float, float, float]
    load_end: tuple[float, float, float]
    litellm_status: str
    litellm_version: str | None
    pg_version: str
    temporal_version: str
    started: datetime
    duration_s: float
    yardstick: tuple[float, float]
    counts: dict[str, int]
    rounds: int


def by_round(runs: list[Run], path: str, scenario: str) -> list[Run]:
    """A path's runs of one scenario in the order they ran: one per round."""
    return [r for r in runs if r.path == path and r.scenario == scenario]


def merged(runs: list[Run]) -> dict[str, Any]:
    """The numbers of one path's runs of one scenario, their calls taken together: of every
    round (`collect`), or of one round alone (bench/invoke_rounds.py)."""
    samples = [x for r in runs for x in r.samples]
    totals = [x.total * 1000 for x in samples]
    ttfts = [x.ttft * 1000 for x in samples if x.ttft is not None]
    wall = sum(r.wall for r in runs)
    cpu: Counter[str] = Counter()
    for r in runs:
        cpu.update(r.cpu)
    busy = [r.machine_busy for r in runs]
    others = [r.others for r in runs]
    return {
        "n": len(samples),
        "errors": sum(len(r.errors) for r in runs),
        "error_sample": next((r.errors[0] for r in runs if r.errors), None),
        "p50": pct(totals, 0.5),
        "p95": pct(totals, 0.95),
        "p99": pct(totals, 0.99),
        "ttft50": pct(ttfts, 0.5),
        "ttft95": pct(ttfts, 0.95),
        "rps": len(samples) / wall if wall else float("nan"),
        "cpu_ms": {k: v * 1000 / max(1, len(samples)) for k, v in cpu.items()},
        "busy": statistics.fmean(busy) if busy else float("nan"),
        "others": statistics.fmean(others) if others else float("nan"),
    }


def collect(res: Results) -> dict[tuple[str, str], dict[str, Any]]:
    """(path, scenario) -> merged numbers over rounds."""
    return {(p, s): merged(by_round(res.runs, p, s)) for p in res.paths for s in SCENARIOS}
