"""One whole run of the invoke benchmark: wait for a quiet machine, bring the stack up (database,
Temporal, upstream, worker, API, LiteLLM), measure, and tear everything down whatever happens."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy.engine import make_url

from bench.invoke_config import FULL, LITELLM_KEY, LOAD_LIMIT, MODEL_LITELLM, QUICK
from bench.invoke_database import create_database, drop_database
from bench.invoke_measure import measure
from bench.invoke_meter import Meter
from bench.invoke_results import Results
from bench.invoke_stack import VENV_BIN, Stack
from bench.machine_speed import calibrate, wait_for_quiet
from store.migrate import upgrade


def litellm_version(litellm: Path) -> str | None:
    python = litellm.parent / "python"
    try:
        out = subprocess.run(
            [str(python), "-c", "import importlib.metadata as m; print(m.version('litellm'))"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        return out.stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        return None


def temporal_cli_version() -> str:
    try:
        out = subprocess.run(
            [str(VENV_BIN / "temporal"), "--version"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    m = re.search(r"Server ([0-9.]+)", out.stdout)
    return m.group(1) if m else out.stdout.strip()[:40]


def run(args: argparse.Namespace) -> Results:
    load_start = wait_for_quiet(0 if args.quick else args.max_wait_load, LOAD_LIMIT)
    started = datetime.now(UTC)
    t_start = time.monotonic()
    yardstick = calibrate()
    stack = Stack()
    meter = Meter(stack)
    database_url = ""
    pg_version = "?"
    server_url = os.environ.get("MODEL_ROUTER_BENCH_DATABASE_URL", "")
    litellm = Path(args.litellm)
    litellm_status = "not run (--no-litellm)"
    litellm_ver = None
    try:
        print(f"work dir {stack.work}", flush=True)
        if not server_url:
            server_url = stack.start_postgres()
            print(f"PostgreSQL on {make_url(server_url).port}", flush=True)
        database_url, pg_version = asyncio.run(create_database(server_url))
        upgrade(database_url)
        stack.start_temporal()
        print(f"Temporal dev server on {stack.temporal_port}", flush=True)
        stack.start_upstream()
        env = stack.service_env(database_url)
        stack.start_worker(env)
        stack.start_api(env)
        print(f"upstream {stack.upstream_port}, API {stack.api_port}", flush=True)
        litellm_on = False
        if not args.no_litellm:
            if litellm.exists():
                litellm_ver = litellm_version(litellm)
                try:
                    stack.start_litellm(litellm, LITELLM_KEY, MODEL_LITELLM)
                    litellm_on = True
                    litellm_status = f"ran (LiteLLM {litellm_ver}, proxy on {stack.litellm_port})"
                    print(f"LiteLLM proxy {litellm_ver} on {stack.litellm_port}", flush=True)
                except RuntimeError as exc:
                    litellm_status = f"failed to start: {str(exc).splitlines()[0]}"
                    print(litellm_status, flush=True)
            else:
                litellm_status = f"not installed ({litellm} missing)"
        settings = stack.settings(database_url)
        meter.start()
        measured = asyncio.run(
            measure(stack, settings, database_url, args.quick, litellm_on, meter)
        )
        meter.stop()
        rss = meter.rss()
        paths = ["direct", "gateway"] + (["litellm"] if litellm_on else [])
        return Results(
            runs=measured.runs,
            paths=paths,
            probes=measured.probes,
            receipts=measured.receipts,
            pg=measured.pg,
            temporal_per_call=measured.temporal_per_call,
            pg_connections_per_call=measured.pg_connections_per_call,
            extra=measured.extra,
            ceiling=measured.ceiling,
            rss=rss,
            load_start=load_start,
            load_end=os.getloadavg(),
            litellm_status=litellm_status,
            litellm_version=litellm_ver,
            pg_version=pg_version,
            temporal_version=temporal_cli_version(),
            started=started,
            duration_s=time.monotonic() - t_start,
            yardstick=(yardstick, calibrate()),
            counts=QUICK if args.quick else FULL,
            rounds=1 if args.quick else 2,
        )
    except BaseException:
        for name in ("api", "worker", "litellm"):
            child = stack.child(name)
            if child is not None:
                print(f"--- {name} log tail ---\n{child.tail(20)}", file=sys.stderr)
        raise
    finally:
        meter.stop()
        stack.close(keep=args.keep)  # the services first: they hold connections to the database
        if database_url and os.environ.get("MODEL_ROUTER_BENCH_DATABASE_URL"):
            with contextlib.suppress(Exception):
                asyncio.run(drop_database(server_url, database_url))
