"""Where the Temporal dev server spends its CPU: `perf record -g` samples of its process, named
with the binary's own function table (bench/go_symbols.py), summed by part of the server.

Used by `bench/profile_invoke.py --dev-server`, which records the samples under the
benchmark's load. A part counts every sample with one of its functions anywhere on the stack
(inclusive), so parts overlap: the visibility records run inside the history service, and both
run SQLite.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path

from bench.go_symbols import GoSymbols

# (label, parts of function names: a sample is in the part when one of its frames has one)
PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("history service", ("go.temporal.io/server/service/history.",)),
    ("frontend service", ("go.temporal.io/server/service/frontend.",)),
    ("matching service", ("go.temporal.io/server/service/matching.",)),
    (
        "visibility: a closed workflow's record",
        ("(*visibilityManagerImpl).RecordWorkflowExecutionClosed",),
    ),
    (
        "visibility: a started workflow's record",
        ("(*visibilityManagerImpl).RecordWorkflowExecutionStarted",),
    ),
    ("executions: create", ("(*executionRetryablePersistenceClient).CreateWorkflowExecution",)),
    ("executions: update", ("(*executionRetryablePersistenceClient).UpdateWorkflowExecution",)),
    ("executions: load", ("(*executionRetryablePersistenceClient).GetWorkflowExecution",)),
    ("history tasks: read", ("(*executionRetryablePersistenceClient).GetHistoryTasks",)),
    ("SQLite (modernc.org/sqlite: C translated to Go)", ("modernc.org/sqlite",)),
    ("…parsing SQL text", ("modernc.org/sqlite/lib._sqlite3RunParser",)),
    ("…running statements", ("modernc.org/sqlite/lib._sqlite3VdbeExec",)),
    ("gRPC", ("google.golang.org/grpc.",)),
    ("Go garbage collector", ("runtime.gcBgMarkWorker", "runtime.gcAssistAlloc")),
    ("Go's scheduler (looking for work, parking)", ("runtime.schedule", "runtime.findRunnable")),
    ("kernel: page faults", ("k:exc_page_fault", "k:asm_exc_page_fault")),
)

Sample = list[str]  # frames, leaf first; kernel frames as `k:symbol`


def samples(perf_data: Path, symbols: GoSymbols) -> list[Sample]:
    """The recorded stacks, each frame named."""
    text = subprocess.run(
        ["perf", "script", "-i", str(perf_data), "-F", "ip,sym,dso"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    out: list[Sample] = []
    current: Sample = []
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            if current:
                out.append(current)
                current = []
            continue
        if "[kernel" in line:
            current.append("k:" + (parts[1] if len(parts) > 2 else "?"))
            continue
        try:
            # With `-F sym`, perf prints an address of the binary relative to the file.
            address = int(parts[0], 16) + symbols.load_bias
        except ValueError:
            continue
        current.append(symbols.name(address) or "?")
    if current:
        out.append(current)
    return out


def _in(frame: str, marks: tuple[str, ...]) -> bool:
    return any(m in frame for m in marks)


def report(found: list[Sample], top: int = 25) -> str:
    total = len(found) or 1
    by_part: Counter[str] = Counter()
    leaf: Counter[str] = Counter()
    where: Counter[str] = Counter()
    for stack in found:
        for label, marks in PARTS:
            if any(_in(f, marks) for f in stack):
                by_part[label] += 1
        head = stack[0] if stack else "?"
        leaf[head] += 1
        if head.startswith("k:"):
            where["the kernel (on the server's behalf)"] += 1
        elif head.startswith("modernc.org/"):
            where["SQLite and its C library, translated to Go"] += 1
        elif head.startswith(("runtime.", "internal/runtime", "aeshashbody", "memeqbody")):
            where["the Go runtime (allocation, GC, scheduler, maps)"] += 1
        elif head.startswith("go.temporal.io/"):
            where["Temporal's own code"] += 1
        elif head.startswith("google.golang.org/protobuf"):
            where["protobuf"] += 1
        else:
            where["other libraries"] += 1
    lines = [f"{len(found)} samples of the dev server", "", "self time, by where the leaf is:"]
    lines += [f"  {n / total:6.1%}  {k}" for k, n in where.most_common()]
    lines += ["", "inclusive, by part of the server (parts overlap):"]
    lines += [f"  {by_part[label] / total:6.1%}  {label}" for label, _ in PARTS]
    lines += ["", "self time, by function:"]
    lines += [f"  {n / total:6.1%}  {k}" for k, n in leaf.most_common(top)]
    return "\n".join(lines)
