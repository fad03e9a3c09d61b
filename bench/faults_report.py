"""The fault benchmark's section of docs/benchmarks.md: each fault with the calls around it and
what became of them, the whole run's outcomes, and the receipts against the keys and the
upstream's count — with the robustness targets judged as met or not."""

from __future__ import annotations

from collections import Counter

from bench.fault_calls import (
    DROPPED,
    ERROR_EVENT,
    LOST,
    OK,
    REFUSED,
    SPENT,
    UNREACHABLE,
    Call,
)
from bench.fault_injection import FREEZE_SECONDS, OUTAGE_SECONDS, Fault
from bench.fault_receipts import Receipts
from bench.faults_run import CHUNK_DELAY, FaultRun
from bench.invoke_results import pct

START, END = "<!-- bench:faults:start -->", "<!-- bench:faults:end -->"
# A fault's window runs from the part going away to this long after it was back: the calls
# the fault could touch, and the time the stack takes to answer again.
AFTER_SECONDS = 5.0
SHOWN = (OK, REFUSED, ERROR_EVENT, DROPPED, UNREACHABLE)


def around(calls: list[Call], fault: Fault) -> list[Call]:
    """Calls in flight at any moment of the fault's window."""
    hi = fault.back + AFTER_SECONDS
    return [c for c in calls if c.at <= hi and c.at + c.took >= fault.began]


def _claimed_around(at: float, fault: Fault) -> bool:
    """A claim made in the fault's window, or in the second before it: a call in flight when
    the fault came was claimed a moment earlier."""
    return fault.began - 1.0 <= at <= fault.back + AFTER_SECONDS


def first_answer_after(calls: list[Call], fault: Fault) -> float | None:
    """Seconds from the part being back to the first call sent after it that was answered."""
    sent = [c.at for c in calls if c.outcome == OK and c.at >= fault.back]
    return min(sent) - fault.back if sent else None


def others(calls: list[Call]) -> Counter[str]:
    return Counter(f"{c.outcome} ({c.detail})" for c in calls if c.outcome not in SHOWN)


def _count_cells(calls: list[Call]) -> str:
    kinds = Counter(c.outcome for c in calls)
    cells = [f"{kinds[k]:,}" for k in SHOWN]
    return " | ".join([*cells, f"{sum(others(calls).values()):,}"])


def _fault_rows(run: FaultRun) -> list[str]:
    lines = [
        "| fault | went / back (s into the load) | calls around it | answered | refused "
        "(429/503 + Retry-After) | error event | dropped | unreachable | other | refused "
        "p50 / max ms | first answer after back (s) | receipts swept, claimed from 1 s before "
        "it |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for fault in run.faults:
        calls = around(run.calls, fault)
        refused = [c.took * 1000 for c in calls if c.outcome == REFUSED]
        waits = f"{pct(refused, 0.5):.0f} / {max(refused):.0f}" if refused else "—"
        first = first_answer_after(run.calls, fault)
        swept = sum(1 for at in run.swept_claims if _claimed_around(at, fault))
        lines.append(
            f"| {fault.name} | {fault.began:.1f} / {fault.back:.1f} | {len(calls):,} | "
            f"{_count_cells(calls)} | {waits} | {'—' if first is None else f'{first:.2f}'} | "
            f"{swept} |"
        )
    return lines


def _receipt_rows(label: str, r: Receipts) -> list[str]:
    closed = "over the bound" if r.closed_after is None else f"{r.closed_after:.1f} s"
    outcomes = ", ".join(f"{k} {n:,}" for k, n in sorted(r.by_outcome.items()))
    reasons = ", ".join(f"{k} {n:,}" for k, n in sorted(r.by_reason.items()))
    longest = ", ".join(f"{k} {s:.1f}" for k, s in sorted(r.longest_open.items()))
    return [
        f"| receipts {label}: total / closed / open | {r.total:,} / {r.closed:,} / "
        f"{r.total - r.closed:,} (the last closed {closed} after the load) |",
        f"| …by outcome | {outcomes} |",
        f"| …by close reason | {reasons} |",
        f"| …the longest one stayed open, claim to close, by close reason (s) | {longest} |",
    ]


def _verdict(ok: bool) -> str:
    return "met" if ok else "**NOT met**"


def targets(run: FaultRun) -> list[str]:
    kill = next((f for f in run.faults if f.name == "API killed"), None)
    dropped = [c for c in run.calls if c.outcome == DROPPED]
    off_kill = [c for c in dropped if kill is None or c not in around(run.calls, kill)]
    # A retry may find its key spent (a 409), or the answer its call completed lost with the
    # process that was to store it; a first call, whose key is new, never may.
    bad = others(run.calls) + others([c for c in run.retries if c.outcome not in (SPENT, LOST)])
    killed = {c.key for c in dropped if c not in off_kill}
    lost = [c for c in run.retries if c.outcome == LOST]
    lost_elsewhere = [c for c in lost if c.key not in killed]
    final = run.after_retries
    keys = len({c.key for c in run.calls})
    return [
        f"- no receipt left open: {_verdict(final.total == final.closed)} "
        f"({final.total - final.closed} open of {final.total:,}).",
        f"- no key called twice at the provider: {_verdict(run.upstream_calls <= final.total)} "
        f"({run.upstream_calls:,} upstream calls for {final.total:,} receipts).",
        f"- every key has its receipt once retried: {_verdict(final.total == keys)} "
        f"({final.total:,} receipts for {keys:,} keys).",
        f"- no status but 200, a refusal with Retry-After or an error event (and, to a retry, "
        f"a spent key's 409): "
        f"{_verdict(not bad)} ({', '.join(f'{k} {n}' for k, n in bad.items()) or 'none'}).",
        f"- calls dropped, and answers lost, only where the process holding them was killed: "
        f"{_verdict(not off_kill and not lost_elsewhere)} ({len(dropped)} dropped, "
        f"{len(off_kill)} outside the kill; {len(lost)} answers lost, {len(lost_elsewhere)} "
        "of calls not cut by the kill).",
    ]


def section(run: FaultRun) -> str:
    kinds = Counter(c.outcome for c in run.calls)
    retried = Counter(c.outcome for c in run.retries)
    answered = kinds[OK] / len(run.calls) if run.calls else 0.0
    lines = [
        START,
        "## Faults under load: PostgreSQL, Temporal, the API, the worker (`bench/bench_faults.py`)",
        "",
        f"{run.started:%Y-%m-%d %H:%M} UTC: {run.seconds:.0f} s at c={run.concurrency} against "
        "the upstream simulator, streamed and non-streamed calls alternating, every call its own "
        f"Idempotency-Key; the simulator streams a chunk every {CHUNK_DELAY * 1000:.0f} ms "
        "(about 0.2 s a call), so every fault finds calls before their claim, under way and "
        "closing. The Temporal dev server keeps its store in a file, as `make dev`'s does. "
        f"PostgreSQL and Temporal are each stopped for {OUTAGE_SECONDS:.0f} s (connections "
        f"refused) and later frozen for {FREEZE_SECONDS:.0f} s (SIGSTOP: connections held open, "
        "nothing answered, which only the gateway's own bounds end); the API and the worker "
        "are killed with SIGKILL and started again at once, as a supervisor would; the API's "
        f"provider clients are refreshed every {run.adapter_ttl:.0f} s throughout. A caller "
        "refused waits the Retry-After (at most 1 s) and sends its next call. Load average "
        f"{run.load[0]:.2f} at the start, {run.load[1]:.2f} at the end (shared machine).",
        "",
        f"Each fault, with the calls in flight from the part going away to {AFTER_SECONDS:.0f} s "
        "after it was back (answered = a 200 with the whole answer):",
        "",
        *_fault_rows(run),
        "",
        "The whole run:",
        "",
        "| | value |",
        "|---|---|",
        f"| calls | {len(run.calls):,} ({len(run.calls) / run.seconds:.0f}/s) |",
        f"| answered | {kinds[OK]:,} ({answered:.1%}) |",
        f"| refused with Retry-After / error event in a stream | {kinds[REFUSED]:,} / "
        f"{kinds[ERROR_EVENT]:,} |",
        f"| dropped (cut with no status or error event) / unreachable (API not listening) | "
        f"{kinds[DROPPED]:,} / {kinds[UNREACHABLE]:,} |",
        *_receipt_rows("after the load", run.after_load),
        f"| keys not answered, sent again | {len(run.retries):,}: "
        + ", ".join(f"{k} {n:,}" for k, n in sorted(retried.items()))
        + " |",
        *_receipt_rows("after those retries", run.after_retries),
        f"| upstream calls | {run.upstream_calls:,} |",
        "| claims that landed after the API gave up on them, undone (the API's log) | "
        f"{run.undone_late_claims} |",
        "",
        "Reading: a call refused during an outage claimed nothing and called nothing, so its "
        "key is new to the retry. A call cut by the API's death keeps its receipt: closed by "
        "its InvokeModel workflow on the worker when Temporal had accepted its start, or, when "
        "the process died between the claim and that acceptance (the provider call begins "
        "alongside the start), by the receipt sweeper: no workflow will ever close it, so it "
        "is swept once open past the start's bound and a margin (production settings here: "
        "5 s + 25 s, a sweep every minute; `domain/sweep.py`): Failed, usage Unknown, close "
        "reason `swept`. A retry of such a "
        "key replays that close (a 409 `swept`, or its error event in a stream): the provider "
        f"may have billed it. Swept here: {run.after_retries.by_reason.get('swept', 0)}. A "
        "call the killed API had completed, its receipt closed, but whose answer's file it had "
        "not yet written (the file goes beside the answer, off its path) replays as the named "
        "failure `output_unavailable` (answer lost): the answer died with the process.",
        "",
        "Targets (the robustness the brief asks for under ordinary infrastructure faults):",
        "",
        *targets(run),
        END,
    ]
    return "\n".join(lines)
