"""Soak: the invoke path under steady load for minutes — errors, latency in the first and the
last minute, API and worker memory at the start and the end, receipts closed against calls.

Run: .venv/bin/python bench/bench_soak.py [--minutes 5] [--concurrency 16] [--adapter-ttl 60]
     [--quick]

It brings up its own stack as bench/bench_invoke.py does (throwaway PostgreSQL, Temporal dev
server, upstream simulator, worker, API), seeds the same catalog, and writes its own section of
docs/benchmarks.md (`--quick`: one minute, no doc update). Work: bench/soak_run.py (the run) and
bench/soak_report.py (the section).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.doc_section import write_section  # noqa: E402
from bench.soak_report import END, START, section  # noqa: E402
from bench.soak_run import run  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument(
        "--adapter-ttl",
        type=float,
        default=60.0,
        help="seconds between provider-client refreshes in the API (its default is 300)",
    )
    parser.add_argument("--quick", action="store_true", help="one minute, no doc update")
    args = parser.parse_args()
    minutes = 1.0 if args.quick else args.minutes
    soak = run(minutes, args.concurrency, args.adapter_ttl)
    text = section(soak)
    print(text)
    if not args.quick:
        write_section(text, START, END)
    errors = sum(1 for c in soak.calls if c.error)
    if errors or soak.closed != len(soak.calls) or soak.upstream_calls != soak.receipts:
        sys.exit(1)


if __name__ == "__main__":
    main()
