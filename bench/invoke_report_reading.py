"""The reading of the invoke benchmark's numbers: where the time of a call goes at concurrency 1,
what caps throughput, the database, Temporal, the provider call, LiteLLM, the levers the
measurements point at and the noise — every figure filled in from the measured values."""

from __future__ import annotations

from functools import partial
from typing import Any

from bench.invoke_config import POOL_SIZE, SCENARIOS
from bench.invoke_results import ROUTING_READS, Results, probe_p50


def analysis(res: Results, m: dict[tuple[str, str], dict[str, Any]]) -> list[str]:
    """The reading of the numbers above, filled in from the measured values."""
    p50 = partial(probe_p50, res.probes)
    g1, d1, g16 = m[("gateway", "ns1")], m[("direct", "ns1")], m[("gateway", "ns16")]
    budget = [
        ("HTTP in and out", p50("api_healthz")),
        ("routing reads", sum(p50(k) for k in ROUTING_READS)),
        ("eager start to the local activity", p50("temporal_start_to_activity")),
        ("claim", p50("db_claim")),
        ("provider call through the adapter", p50("provider_adapter_stream")),
        ("artifact", p50("artifact_put")),
        ("finalize", p50("db_finalize")),
    ]
    cpu = g16["cpu_ms"]
    ours = {k: cpu.get(k, 0.0) for k in ("api", "temporal", "postgres", "worker", "upstream")}
    total = sum(ours.values())
    top = sorted(ours.items(), key=lambda kv: -kv[1])
    api_cpu = max(0.1, cpu.get("api", 0.0))
    lines = [
        "Reading:",
        "",
        "- **Concurrency 1.** The pieces of a call, timed alone, add up to "
        f"{sum(v for _, v in budget):.0f} ms ("
        + " + ".join(f"{label} {v:.1f}" for label, v in budget)
        + f") against {g1['p50']:.0f} ms measured end to end back to back, and "
        f"{p50('gateway_paced'):.0f} ms when calls are 100 ms apart"
        + (
            ": back to back, each call also pays for the end of the previous one (its local "
            "activity's result, the workflow task that completes the workflow, the history "
            "long poll answering), which runs in the same process; the timeline above puts "
            "that extra time before the claim"
            if p50("gateway_paced") < 0.85 * g1["p50"]
            else " (pacing changes little: the time is in the call itself)"
        )
        + f". The upstream answers the same body directly in {d1['p50']:.1f} ms.",
        f"- **Throughput.** At c=16 a call costs {total:.1f} CPU ms in our processes ("
        + ", ".join(f"{k} {v:.1f}" for k, v in top)
        + f") plus {cpu.get('bench', 0):.1f} in the load generator. Two cores give 2,000 CPU ms "
        f"a second, so the machine caps out near "
        f"{2000 / max(0.1, total + cpu.get('bench', 0)):.0f} calls/s; and the API is one "
        f"Python process whose work runs on one event loop under one GIL, so at "
        f"{api_cpu:.1f} CPU ms a call it tops out near {1000 / api_cpu:.0f} calls/s "
        "whatever the machine (a little more: part of that CPU is the Temporal SDK's Rust "
        "threads). Measured: "
        f"{g16['rps']:.0f} calls/s.",
    ]
    if res.pg:
        kinds = res.pg["kinds"]
        pings = kinds.get("pre-ping", 0.0)
        begins = kinds.get("BEGIN", 0.0)
        lines.append(
            f"- **Database.** {res.pg['per_call']:.0f} round trips per invocation for "
            f"{pings:.0f} sessions: every session checkout is pre-pinged ({pings:.0f} pings, each "
            "`BEGIN` / `;` / `ROLLBACK`), every read runs in its own transaction "
            f"({begins:.0f} `BEGIN`s in all), and the data itself is {kinds.get('SELECT', 0):.0f} "
            f"SELECTs, {kinds.get('INSERT', 0):.0f} INSERTs and {kinds.get('UPDATE', 0):.0f} "
            f"UPDATE. PostgreSQL spends {res.pg['server_ms_per_call']:.1f} ms on them; the "
            "client side (SQLAlchemy ORM and asyncpg in the API's event loop) is the cost: "
            f"one bare asyncpg round trip takes {p50('db_raw_select1'):.2f} ms, one ORM read "
            f"in its own session {p50('db_idempotency_lookup'):.1f} ms."
        )
        conns = res.pg_connections_per_call
        if conns:
            lines[-1] += (
                " New PostgreSQL connections opened per gateway call: "
                + ", ".join(f"{k} {conns[k]:.2f}" for k in SCENARIOS if k in conns)
                + f" (the API's pool keeps {POOL_SIZE}; connections beyond it are opened for "
                "the moment and closed again, and each one is a new server process)."
            )
    per_call = res.temporal_per_call
    polls = per_call.get("PollWorkflowExecutionHistory", 0.0)
    lines.append(
        f"- **Temporal.** An eager `start_workflow` returns in {p50('temporal_start_returned'):.1f}"
        f" ms and the local activity starts {p50('temporal_start_to_activity'):.1f} ms after the "
        f"start ({p50('temporal_start_to_activity_unsandboxed'):.1f} ms without the workflow "
        "sandbox, which builds a fresh module namespace for every workflow run: the product's "
        "InvokeModel workers run without it, `activities/invoke_setup.py`); the workflow "
        f"closes {p50('temporal_start_to_result'):.1f} ms after the start, off the response "
        f"path but on the CPU. The dev server spent {cpu.get('temporal', 0):.1f} CPU ms per "
        f"invocation at c=16; per invocation it served "
        + ", ".join(f"{k} {v:.2f}" for k, v in sorted(per_call.items(), key=lambda kv: -kv[1]))
        + (
            ". The `PollWorkflowExecutionHistory` per call is the API's `handle.result()` "
            "watch in `api/invocations.py`, started once the hub has been quiet for 0.25 s: "
            "under load, when calls take over a second, that is most calls."
            if polls >= 0.5
            else "."
        )
    )
    direct_stream = m[("direct", "st1")]["p50"]
    lines.append(
        "- **Provider call.** The gateway always streams from the upstream (so it can report "
        "TTFT and cut to Partial); the product's OpenAI adapter takes "
        f"{p50('provider_adapter_stream'):.1f} ms for the whole streamed answer "
        f"(first text after {p50('provider_adapter_first_token'):.1f} ms) where httpx reading "
        f"the same stream takes {direct_stream:.1f} ms and the non-stream answer "
        f"{d1['p50']:.1f} ms; the SDK builds a typed object for every chunk."
    )
    if "litellm" in res.paths:
        lc = m[("litellm", "ns16")]["cpu_ms"].get("litellm", 0.0)
        lines.append(
            f"- **LiteLLM** spends {lc:.1f} CPU ms per call at c=16 in its one process and "
            "writes nothing durable (no database configured, so no spend log); model-router "
            f"spends {api_cpu:.1f} in the API alone and {total - cpu.get('upstream', 0):.1f} "
            "with Temporal and PostgreSQL, for a receipt claimed before and closed after every "
            "call and a workflow that closes it if the API dies."
        )
    lines += levers(res, m)
    lines.append(
        f"- **Noise.** Load average {res.load_start[0]:.2f} at the start on a machine shared "
        "with other engineers; the paths are interleaved in rounds so each saw the same "
        "neighbours, and the yardstick above shows how fast the CPU was: the absolute numbers "
        "move with it."
    )
    return lines


def levers(res: Results, m: dict[tuple[str, str], dict[str, Any]]) -> list[str]:
    """What the measurements point at, each only while its measurement still shows it (none of
    it is implemented here; each is a product decision)."""
    p50 = partial(probe_p50, res.probes)
    out = []
    kinds = res.pg["kinds"] if res.pg else {}
    if kinds.get("pre-ping", 0) >= 1:
        out.append(
            f"the {kinds['pre-ping'] * 3:.0f} round trips of pool pre-pings (`pool_pre_ping=True` "
            "in `store/db.py`: `BEGIN`, `;`, `ROLLBACK` on every checkout)"
        )
    if kinds.get("BEGIN", 0) - kinds.get("COMMIT", 0) >= 3:
        out.append(
            "a session per database step (idempotency key, catalog version, claim, finalize), "
            "each its own checkout and transaction"
        )
    if res.temporal_per_call.get("PollWorkflowExecutionHistory", 0) >= 0.5:
        out.append(
            "the history long poll (`handle.result()` in `Invocations._follow`), which under "
            "load starts for most calls because the hub is quiet for longer than 0.25 s"
        )
    sdk = p50("provider_adapter_stream") - m[("direct", "st1")]["p50"]
    if sdk >= 2:
        out.append(
            f"the OpenAI SDK's per-chunk objects ({sdk:.1f} ms per answer over reading the "
            "same stream with httpx)"
        )
    if res.pg_connections_per_call.get("ns16", 0) >= 0.05:
        out.append(
            f"connection churn past the pool of {POOL_SIZE} at c=16 "
            f"({res.pg_connections_per_call['ns16']:.2f} new server processes per call)"
        )
    out.append("more than one API process per machine, since one is bound to one core")
    waiting = p50("temporal_start_to_activity")
    others = [
        p50("provider_adapter_stream") - m[("direct", "ns1")]["p50"],
        sum(p50(k) for k in ROUTING_READS),
        p50("api_models"),
    ]
    out.append(
        ("and the largest piece of the c=1 overhead" if waiting > max(others) else "and")
        + f", the provider call waiting {waiting:.0f} ms for the eager workflow task and its local "
        "activity: the receipt's unique claim is the durable guarantee, so the call could "
        "start once claimed, with the workflow started beside it to close the receipt if the "
        "process dies (a change to the design in DESIGN §5, not a tuning)"
    )
    return [
        "- **Levers** the measurements point at (not implemented; product decisions): "
        + "; ".join(out)
        + "."
    ]
