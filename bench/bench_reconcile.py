"""The reconciler's day on a real PostgreSQL: how much memory and time one UTC day of receipts
takes to plan, the day loaded one receipt at a time (the former `reconcile_window`) against
the known usage summed in the database (`store.reconciliation.known_usage_in_window`).

    .venv/bin/python -m bench.bench_reconcile [--receipts 100000] [--pending 2000]

Seeds one day: `--receipts` Reported receipts spread over three deployments (one model and key
each) and `--pending` Unknown ones, and hourly statement lines of each deployment with 1,000
input and 100 output tokens more than the hour's Reported receipts. Each arm reads and plans
(no writes) in a fresh child process, so its peak RSS is its own; both must plan the same
settlements. Starts its own PostgreSQL (bench/local_postgres.py, fsync off) unless
MODEL_ROUTER_BENCH_DATABASE_URL names a server. Writes its section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.doc_section import write_section
from bench.invoke_database import pg_connect
from bench.own_database import own_database
from bench.procfs import proc_rss_kib
from domain.reconciliation import plan
from domain.statements import StatementLine
from store import reconciliation, statements
from store.db import create_engine, session_factory, transaction

DAY = datetime(2026, 11, 20, tzinfo=UTC)
TENANT = "bench"
DEPLOYMENTS = [(f"sim/{i}", f"model-{i}", f"env:KEY_{i}") for i in range(3)]
ARMS = ("day-loaded", "known-summed")
START, END = "<!-- bench:reconcile:start -->", "<!-- bench:reconcile:end -->"


async def _seed(url: str, receipts: int, pending: int) -> None:
    conn = await pg_connect(url)
    try:
        for dep, model, key in DEPLOYMENTS:
            await conn.execute(
                "INSERT INTO model_deployments (tenant_id, deployment_id, provider, model, "
                "region, privacy_class, endpoint_ref, state, healthy, version) VALUES "
                "($1, $2, 'openai', $3, 'eu', 'External', $4, 'Approved', true, 1)",
                TENANT,
                dep,
                model,
                key,
            )
        # Receipts as the invoke path closes them; `g` spreads them evenly over the day.
        seed = """
            INSERT INTO invocation_receipts (invocation_id, tenant_id, project_id, run_id,
                profile_id, deployment_id, fallback_used, request_hash, idempotency_key,
                policy_decision_id, outcome, usage_status, input_tokens, output_tokens,
                cached_input_tokens, pricing_revision, latency_ms, started_at, ended_at,
                provider_request_id, close_reason)
            SELECT gen_random_uuid(), $1, 'p', gen_random_uuid(), 'chat',
                'sim/' || (g % 3), false, 'sha256:x', $2::text || g, gen_random_uuid(),
                'Completed', $3::text, CASE WHEN $3::text = 'Reported' THEN 50 + g % 400 END,
                CASE WHEN $3::text = 'Reported' THEN 5 + g % 40 END,
                CASE WHEN $3::text = 'Reported' THEN 0 END, 'none', 10,
                $4::timestamptz + (g * 86400.0 / $5) * interval '1 second',
                $4::timestamptz + (g * 86400.0 / $5) * interval '1 second', $2::text || g,
                'completed'
            FROM generate_series(0, $5::int - 1) AS g
        """
        await conn.execute(seed, TENANT, "known-", "Reported", DAY, receipts)
        await conn.execute(seed, TENANT, "pending-", "Unknown", DAY, pending)
        await conn.execute("ANALYZE invocation_receipts")
        rows = await conn.fetch(
            "SELECT deployment_id, date_trunc('hour', started_at AT TIME ZONE 'UTC') AS h, "
            "sum(input_tokens) AS i, sum(output_tokens) AS o FROM invocation_receipts "
            "WHERE usage_status = 'Reported' GROUP BY 1, 2"
        )
    finally:
        await conn.close()
    by_dep = {dep: (model, key) for dep, model, key in DEPLOYMENTS}
    lines = []
    for row in rows:
        model, key = by_dep[row["deployment_id"]]
        hour = row["h"].replace(tzinfo=UTC)
        lines.append(
            StatementLine(
                statement_ref=f"usage/{row['deployment_id']}/{hour.isoformat()}",
                source="bench",
                provider="openai",
                model=model,
                key=key,
                bucket_start=hour,
                bucket_end=hour + timedelta(hours=1),
                input_tokens=int(row["i"]) + 1000,
                output_tokens=int(row["o"]) + 100,
            )
        )
    engine = create_engine(url)
    try:
        async with transaction(session_factory(engine)) as session:
            await statements.upsert_lines(session, lines)
    finally:
        await engine.dispose()


async def _arm(url: str, arm: str) -> dict[str, Any]:
    """One arm's read and plan, as `reconcile_window` does them for the day."""
    engine = create_engine(url)
    sessions = session_factory(engine)
    rss_before = proc_rss_kib(os.getpid())[0] / 1024
    cpu, wall = time.process_time(), time.perf_counter()
    end = DAY + timedelta(days=1)
    try:
        async with sessions() as session:
            pending = await reconciliation.receipts_in_window(
                session, start=DAY, end=end, tenant_ids=None, awaiting_only=True
            )
            if arm == "day-loaded":
                day = await reconciliation.receipts_in_window(
                    session, start=DAY, end=end, tenant_ids=None
                )
                usages = [r.usage for r in day]
            else:
                known = await reconciliation.known_usage_in_window(session, start=DAY, end=end)
                usages = [*(r.usage for r in pending), *known]
            lines = await statements.lines_for(
                session,
                providers={r.usage.provider for r in pending},
                tenants={TENANT},
                start=DAY,
                end=end,
                request_ids=(),
            )
        read = time.perf_counter() - wall
        outcome = plan(lines, usages)
    finally:
        await engine.dispose()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    peak = proc_rss_kib(os.getpid())[1] / 1024  # VmHWM: the process's peak
    digest = hashlib.sha256(
        json.dumps(sorted(s.model_dump_json() for s in outcome.settlements)).encode()
    ).hexdigest()
    return {
        "arm": arm,
        "rows": len(usages),
        "settled": len(outcome.settlements),
        "wall_s": wall,
        "read_s": read,
        "cpu_s": cpu,
        "rss_growth_mib": peak - rss_before,
        "digest": digest,
    }


def _child(url: str, arm: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "bench.bench_reconcile", "--child", arm, "--url", url],
        check=True,
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def _report(results: list[dict[str, Any]], receipts: int, pending: int, pg: str) -> str:
    by_arm = {str(r["arm"]): r for r in results}
    rows = [
        "| | day loaded one by one (before) | known usage summed (now) |",
        "|---|---:|---:|",
    ]

    def row(label: str, key: str, fmt: str) -> None:
        cells = [format(float(by_arm[a][key]), fmt) for a in ARMS]
        rows.append(f"| {label} | {cells[0]} | {cells[1]} |")

    rows.append(
        f"| rows the rules see | {by_arm[ARMS[0]]['rows']:,} | {by_arm[ARMS[1]]['rows']:,} |"
    )
    row("peak RSS growth of the process (MiB)", "rss_growth_mib", ",.0f")
    row("read from the store (s)", "read_s", ".2f")
    row("read and plan, wall (s)", "wall_s", ".2f")
    row("read and plan, CPU of the process (s)", "cpu_s", ".2f")
    rows.append(
        f"| receipts settled | {by_arm[ARMS[0]]['settled']:,} | {by_arm[ARMS[1]]['settled']:,} |"
    )
    same = by_arm[ARMS[0]]["digest"] == by_arm[ARMS[1]]["digest"]
    loaded = by_arm[ARMS[0]]
    kib = float(loaded["rss_growth_mib"]) * 1024 / int(loaded["rows"])
    a_day = 12 * 86_400  # receipts of a day at 12 calls/s
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return "\n".join(
        [
            START,
            "## The reconciler's day (`bench/bench_reconcile.py`)",
            "",
            f"Run: `.venv/bin/python -m bench.bench_reconcile --receipts {receipts} "
            f"--pending {pending}`. {when} · nproc {os.cpu_count()} · PostgreSQL {pg}. One UTC "
            f"day of {receipts:,} Reported and {pending:,} Unknown receipts on three "
            "deployments, hourly statement lines; each arm reads and plans the day in its own "
            "process (no writes).",
            "",
            *rows,
            "",
            f"Both arms plan the same settlements: **{'yes' if same else 'NO'}**.",
            "",
            f"Loaded one by one, a receipt took {kib:.1f} KiB of the process: a day at 12 "
            f"calls/s ({a_day:,} receipts) needed about {kib * a_day / 1024**2:.1f} GiB in the "
            "worker that way. Summed, the rules see one known row per deployment and minute "
            "(at most 1,440 a deployment a day) beside the receipts still awaiting a statement; "
            "the database still reads the day's known receipts, through "
            "`ix_receipts_usage_status` (usage_status, started_at).",
            END,
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--receipts", type=int, default=100_000)
    parser.add_argument("--pending", type=int, default=2_000)
    parser.add_argument("--child", choices=ARMS)
    parser.add_argument("--url")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(_arm(args.url, args.child))))
        return
    with own_database("mr-bench-reconcile.") as db:
        asyncio.run(_seed(db.url, args.receipts, args.pending))
        print(f"PostgreSQL {db.version}: seeded {args.receipts:,} + {args.pending:,}", flush=True)
        results = []
        for arm in ARMS:
            got = _child(db.url, arm)
            print(json.dumps(got), flush=True)
            results.append(got)
        version = db.version
    text = _report(results, args.receipts, args.pending, version)
    print(text)
    write_section(text, START, END)


if __name__ == "__main__":
    main()
