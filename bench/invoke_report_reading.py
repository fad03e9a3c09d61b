"""The reading of the invoke benchmark's numbers: where the time of a call goes at concurrency 1,
what caps throughput, the database, Temporal, the provider call, LiteLLM, the levers the
measurements point at and the noise — every figure filled in from the measured values."""

from __future__ import annotations

from functools import partial
from typing import Any

from bench.invoke_config import POOL_SIZE, SCENARIOS
from bench.invoke_results import Results, probe_p50

# Every process that works during a gateway run: the gateway's stack and the load generator.
ON_THE_MACHINE = ("api", "worker", "temporal", "postgres", "upstream", "bench")


def c1_floor(m: dict[tuple[str, str], dict[str, Any]]) -> tuple[float, float]:
    """The CPU ms every process on the machine spent per gateway call at c=1 back to back (the
    load generator's included), and the least mean call time two cores allow for that much
    work. Back to back a call also carries what the previous one left behind its answer, so no
    rearranging of the steps of one call brings the mean under this (docs/benchmarks.md,
    twentieth pass: answers sent ahead of their starts' replies measured no faster)."""
    cpu = m[("gateway", "ns1")]["cpu_ms"]
    spent = sum(cpu.get(k, 0.0) for k in ON_THE_MACHINE)
    return spent, spent / 2


def analysis(res: Results, m: dict[tuple[str, str], dict[str, Any]]) -> list[str]:
    """The reading of the numbers above, filled in from the measured values."""
    p50 = partial(probe_p50, res.probes)
    g1, d1, g16 = m[("gateway", "ns1")], m[("direct", "ns1")], m[("gateway", "ns16")]
    budget = [
        ("HTTP in and out", p50("api_healthz")),
        ("routing (the snapshot in memory)", p50("catalog_cached")),
        ("claim with its catalog version check", p50("db_claim")),
        (
            # The provider call runs alongside the start (INVOKE_START_OVERLAP_SECONDS).
            "the eager start returning, or the provider call through the adapter alongside it "
            "if longer",
            max(p50("temporal_start_returned_unsandboxed"), p50("provider_adapter_stream")),
        ),
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
            else (
                " (slower than back to back: every process wakes for each call, below)"
                if p50("gateway_paced") > 1.15 * g1["p50"]
                else " (pacing changes little: the time is in the call itself)"
            )
        )
        + (
            f"; {p50('gateway_idle'):.0f} ms 500 ms apart, past the overlap window, where "
            "the call begins once Temporal's health service answers rather than after the "
            "start's reply"
            if res.probes.get("gateway_idle")
            else ""
        )
        + f". The upstream answers the same body directly in {d1['p50']:.1f} ms. "
        + _machine_at_c1(m)
        + _paced_at_c1(res),
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
        _ceiling(res, m),
    ]
    if res.pg:
        kinds = res.pg["kinds"]
        lines.append(
            f"- **Database.** {res.pg['per_call']:.0f} round trips per invocation ("
            + ", ".join(f"{k} {v:.1f}" for k, v in kinds.items())
            + "): the claim (which also checks the catalog snapshot's version) and the "
            "finalize, each one statement on the "
            "invoke path's own asyncpg pool without a reset or pre-ping round trip "
            "(`store/receipt_statements.py`)."
            f" PostgreSQL spends {res.pg['server_ms_per_call']:.1f} ms on them; one bare "
            f"asyncpg round trip takes {p50('db_raw_select1'):.2f} ms, the claim "
            f"{p50('db_claim'):.2f} ms and the finalize {p50('db_finalize'):.2f} ms straight "
            "on asyncpg (`store/asyncpg_path.py`, compiled once from the SQLAlchemy statements)."
        )
        conns = res.pg_connections_per_call
        if conns:
            lines[-1] += (
                " New PostgreSQL connections opened per gateway call: "
                + ", ".join(f"{k} {conns[k]:.2f}" for k in SCENARIOS if k in conns)
                + f" (the invoke path's pool keeps up to {2 * POOL_SIZE}, opened as the load "
                "needs them; connections beyond it are opened for the moment and closed again, "
                "and each one is a new server process)."
            )
    per_call = res.temporal_per_call
    polls = per_call.get("PollWorkflowExecutionHistory", 0.0)
    lines.append(
        f"- **Temporal.** An eager `start_workflow` returns in "
        f"{p50('temporal_start_returned_unsandboxed'):.1f} ms: that reply is the one piece of "
        "Temporal left on the response path. The provider call runs alongside it (a start was "
        "accepted moments before, `INVOKE_START_OVERLAP_SECONDS`) and closes its receipt as it "
        "ends; the answer goes at once within the process's lead over its starts "
        "(`INVOKE_ANSWERS_AHEAD`, 2), else it waits for the reply, so that answers never run "
        "further ahead of Temporal's acceptance of their workflows. The local activity starts "
        f"{p50('temporal_start_to_activity_unsandboxed'):.1f} ms after the start and the "
        f"workflow closes {p50('temporal_start_to_result_unsandboxed'):.1f} ms after it (the "
        "product's InvokeModel workers run without the sandbox, `activities/invoke_setup.py`), "
        "both now off the response path — the call no longer waits for the activity, nor "
        "the caller's answer for the activity's close — but not off the CPU: the API process "
        "runs the workflow task (its two activations on the event loop's own thread, "
        "`InlineWorkflowTasks`, not a pool thread), the local activity and the completion "
        "(reported once the response is over), and the SDK's Rust threads are part of the "
        f"API's CPU. The dev server spent {cpu.get('temporal', 0):.1f} "
        "CPU ms per "
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
        "- **Provider call.** The gateway always streams from the upstream, a non-stream "
        "caller included (decided: the first-token and idle timeouts, which fail a stalled "
        "provider over after its silence rather than at the attempt's bound, need the stream, "
        "as a non-stream answer's headers come only once it is whole; reading it whole would "
        "save the API about 0.3-0.6 CPU ms a call, twenty-second pass); the product's OpenAI "
        "adapter takes "
        f"{p50('provider_adapter_stream'):.1f} ms for the whole streamed answer "
        f"(first text after {p50('provider_adapter_first_token'):.1f} ms) where httpx reading "
        f"the same stream takes {direct_stream:.1f} ms and the non-stream answer "
        f"{d1['p50']:.1f} ms. The SDK sends the request (its generic `post` with the body "
        "as built, on its aiohttp transport) and the adapter parses the raw server-sent "
        "events itself (no typed object per chunk)."
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


def _machine_at_c1(m: dict[tuple[str, str], dict[str, Any]]) -> str:
    """Back to back at c=1 the machine's two cores, not a wait, bound the calls' mean."""
    spent, floor = c1_floor(m)
    g1 = m[("gateway", "ns1")]
    text = (
        f"Back to back, every process on the machine spent {spent:.1f} CPU ms per gateway call "
        f"(the load generator's included), the calls' p50 {g1['p50']:.1f} ms: two cores do "
        "at most 2 CPU ms a ms, so calls back to back cannot average under "
        f"{floor:.1f} ms here however their steps overlap"
    )
    lite = m.get(("litellm", "ns1"))
    if lite is None:
        return text + "."
    lite_cpu = sum(lite["cpu_ms"].get(k, 0.0) for k in ("litellm", "upstream", "bench"))
    return text + (
        f"; LiteLLM's path spent {lite_cpu:.1f} CPU ms a call and took {lite['p50']:.1f} ms "
        "(its proxy is one process: one core's work at a time)."
    )


def _paced_at_c1(res: Results) -> str:
    """With think time between calls the cores idle and the floor above does not bind; what
    is left is each process waking for each call, and a gateway call crosses more of them."""
    p50 = partial(probe_p50, res.probes)
    if not res.probes.get("litellm_paced"):
        return ""

    def over(path: str, group: str) -> float:
        return p50(f"{path}_{group}") - p50(f"direct_{group}")

    return (
        " With think time between calls the machine idles and that bound does not hold: 100 "
        f"and 500 ms apart, the gateway added +{over('gateway', 'paced'):.1f} and "
        f"+{over('gateway', 'idle'):.1f} ms to the upstream's own call, LiteLLM's proxy "
        f"+{over('litellm', 'paced'):.1f} and +{over('litellm', 'idle'):.1f}. Then every "
        "process sleeps between calls and wakes for the next, and a gateway call wakes more of "
        "them in turn (the API, PostgreSQL for the claim and the finalize, the dev server, the "
        "upstream) than LiteLLM's (the proxy, the upstream). On this machine an eager start's "
        "reply takes about twice as long 100 ms apart as back to back, and a bare health check "
        "about four times (`bench/start_after_idle.py`, docs/benchmarks.md, twenty-first pass)."
    )


def levers(res: Results, m: dict[tuple[str, str], dict[str, Any]]) -> list[str]:
    """What is left, from the measurements: where the gap to LiteLLM still is."""
    p50 = partial(probe_p50, res.probes)
    g16 = m[("gateway", "ns16")]
    cpu = g16["cpu_ms"]
    out = [
        f"at c=1, the work itself: back to back, {c1_floor(m)[0]:.1f} CPU ms of it per call on "
        "two cores (Concurrency 1 above); the eager start's reply "
        f"({p50('temporal_start_returned_unsandboxed'):.1f} ms alone, longer under load) no "
        "longer holds an answer within the lead of `INVOKE_ANSWERS_AHEAD`, which took it, and "
        "its slow tail, off the answer's path (thirty-fourth pass); its work still runs on "
        "the same two cores",
        f"the API's own CPU ({cpu.get('api', 0):.1f} ms a call at c=16), which includes the "
        "Temporal SDK's work for the workflow task, the local activity and the completion in "
        "the same process (the dev server adds "
        f"{cpu.get('temporal', 0):.1f} ms of its own, about a quarter of it its in-memory "
        "SQLite's rollback journal, mapped and unmapped at every write transaction: "
        "InvokeModel alone cost it 7.1 ms with the journal off against 9.8-10.8 with it, a "
        "switch not adopted because SQLite cannot then undo a transaction, thirty-fifth "
        "pass), "
        "FastAPI/pydantic request handling, "
        "the SDK's request sending, and the receipt's two statements (straight on asyncpg)",
    ]
    out.append(
        "in the 64-stream row, the streams all start together and end together: the setup of "
        "64 invocations (claim, eager start, the workflow task) and then their 64 closes "
        "(finalize, the local activity's result, the workflow's completion) run on the one "
        "event loop that also relays every other stream's chunks, so the streams still "
        "running wait behind them, which is what the p99 gap adds, not a steady cost per chunk "
        "(the p50 gap is the simulator's own); the gaps over 250 ms seen before "
        "`core/gc_tuning.py` were the garbage collector's full collections (about 270 ms each, "
        "every stream stopped), gone with the start-up heap frozen"
    )
    if "litellm" in res.paths:
        out.append(
            "LiteLLM's proxy records nothing durable here (no database configured, no "
            "workflow): what model-router spends beyond it is the price of a receipt claimed "
            "before and closed after every call and a workflow that closes it if the API dies"
        )
    return [
        "- **Where the rest goes** (the gateway's time beyond LiteLLM's, and so what any target "
        "above missed): " + "; ".join(out) + "."
    ]


def _ceiling(res: Results, m: dict[tuple[str, str], dict[str, Any]]) -> str:
    """The Temporal ceiling (bench/invoke_ceiling.py) against the gateway's and LiteLLM's rates."""
    c, g16 = res.ceiling, m[("gateway", "ns16")]
    text = (
        "- **The ceiling.** InvokeModel alone (`bench/invoke_ceiling.py`): started eagerly 16 "
        "at a time from a process of its own set up as the API is (uvloop, the start-up heap "
        "frozen), on a worker built as the API's, its local activity a stub, nothing waiting "
        "on a workflow's result and nothing else per invocation (no HTTP, no database, no "
        "provider call), it ran "
        + " and ".join(f"{r:.0f}" for r in c.rates)
        + " a second on this machine (rounds of the same run right after its c=16 rounds, on a "
        "fresh dev server of its own), "
        f"at {c.process_cpu_ms:.1f} CPU ms in the starting process and {c.server_cpu_ms:.1f} "
        "in the dev server per invocation. Every gateway call does that and more on the same "
        f"two cores, so the gateway's {g16['rps']:.0f} calls/s is "
        f"{g16['rps'] / max(0.1, c.rate) * 100:.0f}% of the ceiling"
    )
    lite = m.get(("litellm", "ns16"))
    if lite is None:
        return text + "."
    side = "at or above" if lite["rps"] >= c.rate else "below"
    text += (
        f"; LiteLLM's proxy ({lite['rps']:.0f} calls/s, its one process's GIL the limit) "
        f"is {side} it"
    )
    if g16["rps"] >= lite["rps"]:
        return text + ", and the gateway at or above LiteLLM's rate in this run."
    if lite["rps"] >= c.rate:
        return (
            text + ": on this machine no code around the workflow could reach LiteLLM's rate, "
            "only cores the dev server does not share."
        )
    return (
        text + ": what keeps the gateway under LiteLLM's rate here is its own work around the "
        "workflow (the request, the receipt's two statements, the provider call: the API "
        f"spent {g16['cpu_ms'].get('api', 0.0):.1f} CPU ms a call against the ceiling's "
        f"{c.process_cpu_ms:.1f} in its starting process) added to the workflow's, on the same "
        "two cores as the dev server. Neither alone would: the workflow alone is the ceiling, "
        "and the same gateway with the workflow left out ran 258-316 calls/s at 3.0-3.6 API CPU "
        "ms a call, about 2.4 times LiteLLM's rate in the same runs (a throwaway build measured "
        "in the twenty-fourth pass, 2026-12-04)."
    )
