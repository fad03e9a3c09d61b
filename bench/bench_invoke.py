"""Invoke-path overhead: the gateway against the local upstream called directly, same machine,
same run — and, when it is installed, LiteLLM's proxy in front of the same upstream.

Run: .venv/bin/python bench/bench_invoke.py [--quick] [--no-litellm] [--litellm PATH] [--keep]

By itself it starts a throwaway PostgreSQL (or uses the server in
MODEL_ROUTER_BENCH_DATABASE_URL, creating and dropping a database there), a Temporal dev server,
the upstream simulator, the worker and the API (and LiteLLM's proxy when
/tmp/litellm-venv/bin/litellm or --litellm exists: `bench/install_litellm.sh` installs it into
that throwaway venv, never into the project's). It migrates, seeds a tenant and OAuth client,
registers, evaluates and approves a deployment on the simulator and publishes a profile through
the API and the lifecycle workflow (as the tests do). Then it measures with httpx from this
process: non-stream total latency and stream time to first token at concurrency 1 and 16,
throughput at 16, every gateway call with its own Idempotency-Key; checks that every gateway
call has a closed receipt and that the upstream saw exactly one call per invocation; samples the
RSS and CPU time of each process; times the pieces of a gateway call separately; and writes its
section of docs/benchmarks.md. Everything it started is stopped, whatever happens. `--quick`:
fewer calls, no doc update; `--keep`: keep the temporary directory with every process's log. It
first waits (at most --max-wait-load seconds, 120 by default) for the load average to drop under
1.5, since the machine is shared. The run itself takes about 5 minutes on a 2-core machine.
Right after the main rounds it measures the Temporal ceiling (bench/invoke_ceiling.py):
InvokeModel alone at c=16 on a fresh dev server, the most a gateway that starts a workflow per
call could do on this machine. At the end it adds two rows (bench/invoke_extra.py): `model-router
api --workers 2` at c=16, and 64 concurrent streams of ~300 chunks at ~10 ms a chunk through each
path.

This file is the command line; the work is in the modules beside it: invoke_run.py (one run,
bring-up to teardown), invoke_stack.py with local_postgres.py and child_process.py (the
processes), invoke_database.py, invoke_seed.py (the catalog), invoke_measure.py (warm-up and
rounds), invoke_load.py (the load generator), invoke_meter.py and procfs.py (CPU and memory),
invoke_probes.py (the pieces timed alone), invoke_ceiling.py, invoke_server_stats.py,
invoke_receipts.py, invoke_results.py (percentiles, merged runs) and invoke_report*.py (the docs
section). invoke_pair.py is a separate command on the same parts: two checkouts of the API on one
stack, their calls alternated, for judging a change to the invoke path.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.doc_section import DOC, write_section  # noqa: E402
from bench.invoke_config import DEFAULT_LITELLM, END, LOAD_LIMIT, START  # noqa: E402
from bench.invoke_report import section  # noqa: E402
from bench.invoke_run import run  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls, no doc update")
    parser.add_argument("--no-litellm", action="store_true", help="skip LiteLLM's proxy")
    parser.add_argument("--litellm", default=str(DEFAULT_LITELLM), help="litellm executable")
    parser.add_argument("--keep", action="store_true", help="keep the work dir (logs) afterwards")
    parser.add_argument(
        "--max-wait-load",
        type=float,
        default=120.0,
        help=f"seconds to wait at most for the load average to drop under {LOAD_LIMIT}",
    )
    args = parser.parse_args()
    res = run(args)
    text = section(res)
    print(text)
    if not args.quick:
        write_section(text, START, END)
        print(f"wrote {DOC.relative_to(ROOT)}")
    # The Temporal SDK can abort in PyGILState_Release at interpreter exit: leave cleanly now.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
