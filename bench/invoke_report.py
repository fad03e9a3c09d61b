"""The invoke benchmark's section of docs/benchmarks.md: the head, the main table (latency,
overhead, throughput, CPU, memory, receipts per path), the machine's load and the targets; the
pieces and the reading follow from their own modules."""

from __future__ import annotations

import importlib.util
import os
import platform
from collections.abc import Callable

from bench.invoke_config import DEFAULT_LITELLM, END, RUN_DEADLINE_S, SCENARIOS, START
from bench.invoke_report_pieces import where_section
from bench.invoke_report_reading import c1_floor
from bench.invoke_results import Results, collect, f2, probe_p50
from bench.invoke_rounds import rounds_table
from core.temporal_dev_server import DYNAMIC_CONFIG


def section(res: Results) -> str:
    m = collect(res)
    paths = res.paths
    names = {"direct": "upstream direct", "gateway": "model-router", "litellm": "LiteLLM proxy"}
    head = "| | " + " | ".join(names[p] for p in paths) + " |"
    rule = "|---|" + "---:|" * len(paths)

    def row(label: str, fn: Callable[[str], str]) -> str:
        return f"| {label} | " + " | ".join(fn(p) for p in paths) + " |"

    def lat(s: str) -> Callable[[str], str]:
        return lambda p: f"{f2(m[(p, s)]['p50'])} / {f2(m[(p, s)]['p95'])} / {f2(m[(p, s)]['p99'])}"

    def over(s: str, key: str) -> Callable[[str], str]:
        def fn(p: str) -> str:
            if p == "direct":
                return "—"
            return f"+{f2(m[(p, s)][key] - m[('direct', s)][key])}"

        return fn

    def ttft(s: str) -> Callable[[str], str]:
        return lambda p: f"{f2(m[(p, s)]['ttft50'])} / {f2(m[(p, s)]['ttft95'])}"

    def rps(s: str) -> Callable[[str], str]:
        return lambda p: f"{m[(p, s)]['rps']:.0f}"

    def errors(p: str) -> str:
        return str(sum(m[(p, s)]["errors"] for s in SCENARIOS))

    def calls(p: str) -> str:
        return f"{sum(m[(p, s)]['n'] for s in SCENARIOS):,}"

    def paced(group: str) -> Callable[[str], str]:
        """p50 of the c=1 calls with think time between them (bench/invoke_measure.py), and
        its overhead over the direct path's."""

        def fn(p: str) -> str:
            own = probe_p50(res.probes, f"{p}_{group}")
            if p == "direct":
                return f2(own)
            return f"{f2(own)} (+{f2(own - probe_p50(res.probes, f'direct_{group}'))})"

        return fn

    rc = res.receipts

    def receipts_cell(p: str) -> str:
        if p == "gateway":
            return (
                f"{rc.closed:,} closed of {rc.sent:,} calls, warm-up and probes included "
                f"({rc.completed:,} Completed with usage Reported, an artifact and a cost); "
                f"the upstream saw {rc.upstream_calls:,} gateway calls"
            )
        if p == "litellm":
            return "none (no database configured)"
        return "—"

    def rss_cell(p: str) -> str:
        if p == "gateway" and "api" in res.rss and "worker" in res.rss:
            a, w = res.rss["api"], res.rss["worker"]
            return (
                f"API {a[0] / 1024:.0f} → {a[1] / 1024:.0f}, worker {w[0] / 1024:.0f} → "
                f"{w[1] / 1024:.0f}"
            )
        if p == "litellm" and "litellm" in res.rss:
            x = res.rss["litellm"]
            return f"{x[0] / 1024:.0f} → {x[1] / 1024:.0f}"
        return "—"

    def cpu_cell(s: str) -> Callable[[str], str]:
        def fn(p: str) -> str:
            cpu = m[(p, s)]["cpu_ms"]
            own = {
                "direct": ["upstream"],
                "gateway": ["api", "worker", "temporal", "postgres", "upstream"],
                "litellm": ["litellm", "upstream"],
            }[p]
            parts = [f"{k} {cpu.get(k, 0):.1f}" for k in own]
            return f"{sum(cpu.get(k, 0) for k in own):.1f} ({', '.join(parts)})"

        return fn

    g1, d1 = m[("gateway", "ns1")], m[("direct", "ns1")]
    g16 = m[("gateway", "ns16")]
    all_receipts = rc.closed == rc.sent and not rc.missing and rc.upstream_calls == rc.sent
    gw_errors = sum(m[("gateway", s)]["errors"] for s in SCENARIOS)

    def verdict(ok: bool) -> str:
        return "**met**" if ok else "**NOT met**"

    switches = ", ".join(f"`{key}={value}`" for key, value in DYNAMIC_CONFIG.items())
    lines = [
        START,
        "## Invoke path (`bench/bench_invoke.py`)",
        "",
        "Run: `.venv/bin/python bench/bench_invoke.py` (one command: it starts and stops its own "
        "PostgreSQL, Temporal dev server, upstream simulator, worker, API and, when "
        "`/tmp/litellm-venv/bin/litellm` exists, LiteLLM's proxy; `--quick` for a smoke run "
        "without writing this section).",
        "",
        f"Date {res.started.strftime('%Y-%m-%d %H:%M UTC')} · nproc {os.cpu_count()} · "
        f"Python {platform.python_version()} ({platform.machine()}, {platform.system()}) · "
        f"PostgreSQL {res.pg_version} (fsync off) · Temporal dev server {res.temporal_version} "
        f"(in-memory SQLite; the project's switches, `core/temporal_dev_server.py`: {switches}) "
        f"· load average at start {res.load_start[0]:.2f} / "
        f"{res.load_start[1]:.2f} / {res.load_start[2]:.2f}, at the end "
        f"{res.load_end[0]:.2f} · whole run {res.duration_s:.0f} s · LiteLLM: "
        f"{res.litellm_status}.",
        "",
        "Every process on this one 2-core machine: PostgreSQL, the Temporal dev server, the "
        "upstream simulator (one uvicorn process), the worker, the API (one uvicorn process "
        "with its in-process invocation workers), LiteLLM's proxy (one uvicorn worker, no "
        "database) and the load generator (httpx, in the benchmark's process, its heap collected "
        "and frozen before each measured run so that its own garbage collection does not pause "
        "the calls it times). Each call sends "
        "the same OpenAI chat body (one user message of ~25 words, unique per call; the "
        "simulator echoes it as ~35 tokens); only `model` differs (the upstream model name, "
        "the profile id, LiteLLM's alias). Stream calls ask for "
        "`stream_options.include_usage`. TTFT is the time to the first non-empty content "
        "delta. Every gateway call carries its own `Idempotency-Key`. Calls per path: "
        + ", ".join(f"{k} {v:,}" for k, v in res.counts.items())
        + " (ns = non-stream, st = stream, 1/16 = concurrency; a run also stops issuing "
        f"calls after {RUN_DEADLINE_S:.0f} s), in {res.rounds} round(s) that interleave the "
        "paths (the second in reverse order), after a warm-up. A gateway run's CPU is counted "
        "until its last InvokeModel workflow has closed, not only to its last answer: a "
        "workflow's completion runs after its caller's answer. "
        + (
            "The API runs on uvloop (uvicorn picks it when installed). "
            if importlib.util.find_spec("uvloop")
            else "The API runs on uvicorn's default asyncio loop (the project installs no uvloop); "
        )
        + "LiteLLM's proxy starts uvicorn with uvloop. "
        + _http_parsers()
        + " Milliseconds.",
        "",
        head,
        rule,
        row("non-stream total p50 / p95 / p99, c=1", lat("ns1")),
        row("overhead at p50, c=1", over("ns1", "p50")),
        row("non-stream total p50 (overhead), c=1, one every 100 ms", paced("paced")),
        row("…one every 500 ms (past the gateway's 0.25 s overlap window)", paced("idle")),
        row("non-stream total p50 / p95 / p99, c=16", lat("ns16")),
        row("overhead at p50, c=16", over("ns16", "p50")),
        row("stream TTFT p50 / p95, c=1", ttft("st1")),
        row("TTFT overhead at p50, c=1", over("st1", "ttft50")),
        row("stream TTFT p50 / p95, c=16", ttft("st16")),
        row("TTFT overhead at p50, c=16", over("st16", "ttft50")),
        row("stream total p50 / p95 / p99, c=1", lat("st1")),
        row("throughput at c=16, non-stream (calls/s)", rps("ns16")),
        row("throughput at c=16, stream (calls/s)", rps("st16")),
        row("CPU ms per call at c=16, non-stream", cpu_cell("ns16")),
        row("CPU ms per call at c=1, non-stream", cpu_cell("ns1")),
        row("RSS MiB, after start → peak", rss_cell),
        row("calls measured / errors", lambda p: f"{calls(p)} / {errors(p)}"),
        row("durable receipts", receipts_cell),
        "",
        "Machine busy during the c=16 non-stream runs (all processes, ours and the "
        "neighbours'): "
        + ", ".join(f"{names[p]} {m[(p, 'ns16')]['busy'] * 100:.0f}%" for p in paths)
        + ". The load generator itself used "
        + ", ".join(f"{m[(p, 'ns16')]['cpu_ms'].get('bench', 0):.1f}" for p in paths)
        + " CPU ms per call (same order). Processes this benchmark did not start (other "
        "engineers' work on the shared machine) took "
        + ", ".join(f"{m[(p, 'ns16')]['others'] * 100:.0f}%" for p in paths)
        + " of the machine during those runs, and "
        + ", ".join(f"{m[(p, 'ns1')]['others'] * 100:.0f}%" for p in paths)
        + " during the c=1 non-stream runs. Yardstick `sum(range(1000))`: "
        f"{res.yardstick[0]:.1f} µs before the run, {res.yardstick[1]:.1f} µs after.",
        "",
        "Targets (issue 14; 2-core machine, Temporal dev server and PostgreSQL on the same "
        "box, LiteLLM's proxy in the same run):",
        "",
    ]
    statements = res.pg["per_call"] if res.pg else float("nan")
    start_calls = res.temporal_per_call.get("StartWorkflowExecution", 0.0)
    respond_calls = res.temporal_per_call.get("RespondWorkflowTaskCompleted", 0.0)
    lines += [
        f"- every call with a durable receipt, 0 missing, one upstream call per invocation: "
        f"{verdict(all_receipts and gw_errors == 0)} ({rc.closed:,} closed of {rc.sent:,} "
        f"gateway calls including warm-up and probes, {len(rc.missing)} missing, {gw_errors} "
        f"errors; the upstream received {rc.upstream_calls:,} gateway calls).",
        f"- at most 3 PostgreSQL round trips per invocation (a call without a run): "
        f"{verdict(statements <= 3.0)} ({statements:.1f} in the statement log).",
        f"- Temporal: one StartWorkflowExecution and one RespondWorkflowTaskCompleted per "
        f"invocation: {verdict(abs(start_calls - 1) < 0.05 and abs(respond_calls - 1) < 0.05)} "
        f"({start_calls:.2f} and {respond_calls:.2f}).",
    ]
    if "litellm" in paths:
        l1, l16 = m[("litellm", "ns1")], m[("litellm", "ns16")]
        lt1, lt16 = m[("litellm", "st1")], m[("litellm", "st16")]
        d_st1 = m[("direct", "st1")]
        g_st1, g_st16 = m[("gateway", "st1")], m[("gateway", "st16")]
        ov_g = g1["p50"] - d1["p50"]
        ov_l = l1["p50"] - d1["p50"]
        tt_g = g_st1["ttft50"] - d_st1["ttft50"]
        tt_l = lt1["ttft50"] - d_st1["ttft50"]
        api_cpu = g16["cpu_ms"].get("api", 0.0)
        lite_cpu = l16["cpu_ms"].get("litellm", 0.0)
        c1_spent, c1_least = c1_floor(m)

        def miss(ours: float, theirs: float, unit: str, lower: bool = True) -> str:
            if (ours <= theirs) if lower else (ours >= theirs):
                return ""
            gap = ours - theirs if lower else theirs - ours
            return f"; missed by {gap:.1f} {unit} ({gap / theirs * 100:.0f}%)" if theirs else ""

        lines += [
            f"- non-stream overhead p50 at c=1 ≤ LiteLLM's: {verdict(ov_g <= ov_l)} "
            f"(+{ov_g:.1f} vs +{ov_l:.1f} ms{miss(ov_g, ov_l, 'ms')}; back to back every "
            f"process spent {c1_spent:.1f} CPU ms per gateway call, so on two cores calls "
            f"could not average under {c1_least:.1f} ms; LiteLLM's took {l1['p50']:.1f} ms at "
            "p50: see Concurrency 1 below).",
            f"- TTFT overhead p50 at c=1 ≤ LiteLLM's: {verdict(tt_g <= tt_l)} "
            f"(+{tt_g:.1f} vs +{tt_l:.1f} ms{miss(tt_g, tt_l, 'ms')}).",
            f"- API CPU ms per call at c=16 ≤ LiteLLM's CPU ms per call: "
            f"{verdict(api_cpu <= lite_cpu)} ({api_cpu:.1f} vs {lite_cpu:.1f} ms, non-stream"
            f"{miss(api_cpu, lite_cpu, 'ms')}; the gateway's whole stack: "
            f"{sum(g16['cpu_ms'].get(k, 0) for k in ('api', 'worker', 'temporal', 'postgres')):.1f}"
            " ms with Temporal and PostgreSQL).",
            f"- throughput at c=16, non-stream ≥ LiteLLM's: {verdict(g16['rps'] >= l16['rps'])} "
            f"({g16['rps']:.0f} vs {l16['rps']:.0f} calls/s"
            f"{miss(g16['rps'], l16['rps'], 'calls/s', lower=False)}; InvokeModel alone, with "
            f"nothing else per invocation, ran {res.ceiling.rate:.0f} a second on this machine "
            "in the same run: the most any gateway that starts a workflow per call could do "
            "here, see Throughput below).",
            f"- throughput at c=16, stream ≥ LiteLLM's: "
            f"{verdict(g_st16['rps'] >= lt16['rps'])} ({g_st16['rps']:.0f} vs "
            f"{lt16['rps']:.0f} calls/s{miss(g_st16['rps'], lt16['rps'], 'calls/s', lower=False)}"
            "). LiteLLM here writes no durable record of the call at all.",
        ]
        per_round = rounds_table(res.runs)
        lines += ["", *per_round] if per_round else []
    else:
        lines.append(
            f"- the comparisons with LiteLLM's proxy: not measured in this run — "
            f"{res.litellm_status}."
        )
    if res.extra:
        lines += ["", *res.extra]
    lines += ["", *where_section(res, m), END]
    return "\n".join(lines)


def _http_parsers() -> str:
    """Which HTTP parser uvicorn's `--http auto` picks on each side: httptools when installed."""
    ours = "httptools" if importlib.util.find_spec("httptools") else "h11"
    venv = DEFAULT_LITELLM.parent.parent
    theirs = "httptools" if any(venv.glob("lib/python*/site-packages/httptools")) else "h11"
    return f"HTTP parser: {ours} in the API, {theirs} in LiteLLM's proxy (what each has installed)."
