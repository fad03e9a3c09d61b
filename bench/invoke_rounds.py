"""The LiteLLM targets of issue 14 round by round: the same five comparisons the run's verdicts
make over both rounds, made again on each round's own calls.

Why: on this shared two-core host the same code's verdicts on c=1 non-stream, c=16 non-stream and
API CPU went both ways between full runs minutes apart (docs/benchmarks.md, twenty-second pass:
c=16 non-stream 110-183 calls/s for the gateway and 132-181 for LiteLLM between 10:01 and 10:55).
A run's two rounds interleave the paths, so each round saw the same host for both proxies; where
their verdicts differ, the run's verdict is within the host's spread, and the table says so. The
verdicts above it are still the run's, over every call of both rounds: nothing here replaces them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.invoke_load import Run
from bench.invoke_results import by_round, merged

OURS, THEIRS = "gateway", "litellm"
# The process whose CPU is a path's own: the meter counts every process during every path's run
# (an idle API beside LiteLLM's calls included), so the path says which one the target reads.
OWN_PROCESS = {OURS: "api", THEIRS: "litellm"}

# One round's numbers of a path (`merged`) and the path -> the target's value.
Value = Callable[[dict[str, Any], str], float]


@dataclass(frozen=True)
class Target:
    label: str
    unit: str
    value: Value
    lower_wins: bool
    over_direct: bool  # an overhead: the upstream's own value in the same round subtracted
    digits: int


def _number(key: str) -> Value:
    return lambda numbers, _path: float(numbers[key])


def _own_cpu(numbers: dict[str, Any], path: str) -> float:
    return float(numbers["cpu_ms"].get(OWN_PROCESS[path], 0.0))


TARGETS: tuple[tuple[str, Target], ...] = (
    ("ns1", Target("non-stream overhead p50, c=1", "ms", _number("p50"), True, True, 2)),
    ("st1", Target("TTFT overhead p50, c=1", "ms", _number("ttft50"), True, True, 2)),
    ("ns16", Target("API CPU per call, c=16 (LiteLLM's own)", "ms", _own_cpu, True, False, 1)),
    ("ns16", Target("throughput c=16, non-stream", "calls/s", _number("rps"), False, False, 0)),
    ("st16", Target("throughput c=16, stream", "calls/s", _number("rps"), False, False, 0)),
)


def _cell(target: Target, ours: Run, theirs: Run, direct: Run) -> str:
    base = target.value(merged([direct]), direct.path) if target.over_direct else 0.0
    a, b = (target.value(merged([run]), run.path) - base for run in (ours, theirs))
    met = a <= b if target.lower_wins else a >= b
    shown = f"{{:{'+' if target.over_direct else ''}.{target.digits}f}}"
    return f"{shown.format(a)} / {shown.format(b)} {'met' if met else '**not met**'}"


def rounds_table(runs: list[Run]) -> list[str]:
    """The docs lines: each target's value for the gateway and LiteLLM in each round, and
    whether that round alone meets it. Empty when LiteLLM did not run or a run has one round."""
    rounds = len(by_round(runs, OURS, "ns1"))
    if rounds < 2 or not by_round(runs, THEIRS, "ns1"):
        return []
    head = "| target | " + " | ".join(f"round {i + 1}" for i in range(rounds)) + " |"
    lines = [
        "The same targets on each round's calls alone (model-router / LiteLLM; each round ran "
        "both proxies, interleaved; `bench/invoke_rounds.py`):",
        "",
        head,
        "|---|" + "---|" * rounds,
    ]
    for scenario, target in TARGETS:
        cells = [
            _cell(target, ours, theirs, direct)
            for ours, theirs, direct in zip(
                by_round(runs, OURS, scenario),
                by_round(runs, THEIRS, scenario),
                by_round(runs, "direct", scenario),
                strict=True,
            )
        ]
        lines.append(f"| {target.label} ({target.unit}) | " + " | ".join(cells) + " |")
    return lines
