"""The benchmark's round-by-round table (bench/invoke_rounds.py) judges each round on its own
calls: a target met over the whole run but missed in one round shows as missed in that round."""

from __future__ import annotations

from bench.invoke_config import SCENARIOS
from bench.invoke_load import Run, Sample
from bench.invoke_rounds import rounds_table

# Per round and path: the c=1 totals (s), TTFT (s), c=16 calls in one second, API/LiteLLM CPU (s).
ROUNDS = (
    {"direct": (0.001, 0.001, 900, 0.0), "gateway": (0.007, 0.008, 150, 0.8),
     "litellm": (0.008, 0.011, 140, 0.9)},
    {"direct": (0.001, 0.001, 900, 0.0), "gateway": (0.009, 0.008, 130, 1.0),
     "litellm": (0.006, 0.011, 160, 0.9)},
)  # fmt: skip


def _runs() -> list[Run]:
    runs = []
    for values in ROUNDS:
        for scenario in SCENARIOS:
            for path, (total, ttft, rate, cpu) in values.items():
                n = rate if scenario.endswith("16") else 20
                stream = scenario.startswith("st")
                samples = [Sample(total=total, ttft=ttft if stream else None) for _ in range(n)]
                own = {"gateway": "api", "litellm": "litellm"}.get(path, "upstream")
                # The meter counts every process in every path's run: the others idle here.
                cpu_s = dict.fromkeys(("api", "litellm", "upstream", "temporal"), 0.0001)
                cpu_s[own] = cpu * n / 100
                runs.append(Run(path, scenario, samples, [], 1.0, cpu_s, 0.5))
    return runs


def test_each_round_is_judged_on_its_own_calls() -> None:
    table = "\n".join(rounds_table(_runs()))
    rows = {line.split(" | ")[0].strip("| "): line for line in table.splitlines() if "|" in line}
    c1 = rows["non-stream overhead p50, c=1 (ms)"]
    assert "+6.00 / +7.00 met" in c1 and "+8.00 / +5.00 **not met**" in c1
    assert rows["TTFT overhead p50, c=1 (ms)"].count("+7.00 / +10.00 met") == 2
    cpu = rows["API CPU per call, c=16 (LiteLLM's own) (ms)"]
    assert "8.0 / 9.0 met" in cpu and "10.0 / 9.0 **not met**" in cpu
    rate = rows["throughput c=16, non-stream (calls/s)"]
    assert "150 / 140 met" in rate and "130 / 160 **not met**" in rate


def test_no_table_without_litellm_or_with_one_round() -> None:
    runs = _runs()
    assert rounds_table([r for r in runs if r.path != "litellm"]) == []
    assert rounds_table(runs[: len(runs) // 2]) == []
