"""Faults under load: the invoke path at c=16 while PostgreSQL and Temporal are stopped and
started again, then frozen, the API and the worker are killed and started again, and the
provider clients are refreshed — what each caller got, every receipt closed, no key called
twice.

Run: .venv/bin/python bench/bench_faults.py [--seconds 240] [--concurrency 16]
     [--adapter-ttl 50] [--quick]

It brings up its own stack as bench/bench_invoke.py does (throwaway PostgreSQL, a Temporal dev
server whose store is a file, upstream simulator, worker, API) and writes its own section of
docs/benchmarks.md (`--quick`: 150 s, no doc update). Exit status 1 when a target is missed.
Work: bench/faults_run.py (the run), bench/fault_injection.py (the faults), bench/fault_calls.py
(one call and its outcome), bench/fault_receipts.py (the receipts counted) and
bench/faults_report.py (the section).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.doc_section import write_section  # noqa: E402
from bench.faults_report import END, START, section, targets  # noqa: E402
from bench.faults_run import run  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=240.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument(
        "--adapter-ttl",
        type=float,
        default=50.0,
        help="seconds between provider-client refreshes in the API (its default is 300)",
    )
    parser.add_argument("--quick", action="store_true", help="150 s, no doc update")
    args = parser.parse_args()
    seconds = 150.0 if args.quick else args.seconds
    ttl = 20.0 if args.quick else args.adapter_ttl
    result = run(seconds, args.concurrency, ttl)
    text = section(result)
    print(text)
    if not args.quick:
        write_section(text, START, END)
    if any("NOT met" in line for line in targets(result)):
        sys.exit(1)


if __name__ == "__main__":
    main()
