"""The soak benchmark's section of docs/benchmarks.md: errors, latency in the first and the last
minute, memory at the start and the end, receipts closed against calls, and minute by minute
the calls, their latency and each process's memory."""

from __future__ import annotations

import math
from collections import Counter

from bench.invoke_results import pct
from bench.soak_run import Call, Soak

START, END = "<!-- bench:soak:start -->", "<!-- bench:soak:end -->"


def _window(calls: list[Call], lo: float, hi: float, stream: bool) -> list[float]:
    return [
        c.total * 1000
        for c in calls
        if c.total is not None and lo <= c.at < hi and c.stream == stream
    ]


def _p(values: list[float], q: float) -> str:
    return f"{pct(values, q):.1f}" if values else "—"


def _rss_at(samples: list[tuple[float, int]], at: float) -> str:
    """The last RSS sampled at or before `at` seconds into the soak, in MiB."""
    before = [rss for t, rss in samples if t <= at]
    return f"{before[-1] / 1024:.0f}" if before else "—"


def _minutes(soak: Soak) -> list[str]:
    """One row a minute: calls sent in it, their p50 latency, and RSS at its end."""
    names = sorted(soak.rss_timeline)
    lines = [
        "| minute | calls | p50 ms | " + " | ".join(f"RSS {n} (MiB)" for n in names) + " |",
        "|---:|---:|---:|" + "---:|" * len(names),
    ]
    for minute in range(math.ceil(soak.minutes)):
        lo, hi = minute * 60.0, min((minute + 1) * 60.0, soak.minutes * 60)
        sent = [c for c in soak.calls if lo <= c.at < hi]
        totals = [c.total * 1000 for c in sent if c.total is not None]
        rss = [_rss_at(soak.rss_timeline[n], hi) for n in names]
        lines.append(
            f"| {minute + 1} | {len(sent):,} | {_p(totals, 0.5)} | " + " | ".join(rss) + " |"
        )
    return lines


def section(soak: Soak) -> str:
    calls = soak.calls
    errors = [c for c in calls if c.error]
    span = soak.minutes * 60
    kinds = Counter(c.error.split(":")[0] for c in errors if c.error)
    lines = [
        START,
        "## Soak: the invoke path for minutes under steady load",
        "",
        f"`bench/bench_soak.py`, {soak.started:%Y-%m-%d %H:%M} UTC: {soak.minutes:g} minutes at "
        f"c={soak.concurrency} against the upstream simulator, every call its own "
        "Idempotency-Key, streamed and non-streamed calls alternating; the API's provider "
        f"clients refreshed every {soak.adapter_ttl:g} s "
        "(`MODEL_ROUTER_INVOKE_ADAPTER_TTL_SECONDS`), so the run crosses "
        f"{max(0, math.ceil(span / soak.adapter_ttl) - 1)} refreshes under load. Load average "
        f"{soak.load[0]:.2f} at the start, {soak.load[1]:.2f} at the end (shared machine).",
        "",
        "| | value |",
        "|---|---:|",
        f"| calls | {len(calls):,} |",
        f"| errors (want 0) | {len(errors)}"
        + (f" ({', '.join(f'{k} {v}' for k, v in kinds.items())})" if errors else "")
        + " |",
        f"| throughput (calls/s) | {len(calls) / span:.1f} |",
        f"| receipts / closed (want = calls) | {soak.receipts:,} / {soak.closed:,} |",
        f"| upstream calls (want = receipts: no key called twice) | {soak.upstream_calls:,} |",
    ]
    for name, (first, peak, last, _hwm) in sorted(soak.rss.items()):
        lines.append(
            f"| RSS {name}: start / peak / end (MiB) | {first / 1024:.0f} / {peak / 1024:.0f} / "
            f"{last / 1024:.0f} |"
        )
    lines += [
        "",
        "| latency, ms | first minute p50 / p99 | last minute p50 / p99 |",
        "|---|---:|---:|",
    ]
    for stream, label in ((False, "non-stream total"), (True, "stream total")):
        early = _window(calls, 0, 60, stream)
        late = _window(calls, span - 60, span, stream)
        lines.append(
            f"| {label} | {_p(early, 0.5)} / {_p(early, 0.99)} "
            f"| {_p(late, 0.5)} / {_p(late, 0.99)} |"
        )
    if soak.rss_timeline:
        lines += ["", *_minutes(soak)]
    if "temporal" in soak.rss and calls:
        first, _peak, last, _hwm = soak.rss["temporal"]
        lines += [
            "",
            "The benchmark's Temporal dev server keeps its store in memory (no `--db-filename`), "
            "so it holds every workflow's history and its RSS grows with the calls: "
            f"{(last - first) / len(calls):.0f} KiB per invocation in this run. "
            "`make dev`'s server keeps it in a file.",
        ]
    if errors:
        lines += ["", "Errors (first five, with the second of the soak they were sent at):", ""]
        lines += [f"- +{c.at:.1f} s: {c.error}" for c in errors[:5]]
    lines.append(END)
    return "\n".join(lines)
