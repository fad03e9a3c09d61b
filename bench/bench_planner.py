"""Route-plan resolution latency for catalogs of 10, 100 and 1,000 deployments.

Run: .venv/bin/python bench/bench_planner.py [--quick]

Every deployment is listed by the profile (the worst case: the planner looks at all of them),
with a realistic mix of refusals: lifecycle, pool, privacy, tenant policy, thresholds, context
windows. Measures `plan_route` (what ResolveRoutePlan needs: ordered ids, constraints, decision
id) and, separately, `to_result()` (materialising every candidate and exclusion as pydantic
objects, which only the preview endpoint pays for). Writes its section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.doc_section import DOC, write_section  # noqa: E402
from bench.machine_speed import calibrate  # noqa: E402
from domain.enums import Capability, LatencyClass, Modality, PrivacyClass  # noqa: E402
from domain.planner import PlanRequest, plan_route  # noqa: E402
from domain.policy import DataClassification, TenantPolicy  # noqa: E402
from domain.profiles import ModelProfile  # noqa: E402
from domain.snapshot import CatalogSnapshot  # noqa: E402

START, END = "<!-- bench:planner:start -->", "<!-- bench:planner:end -->"
TENANT = "tenant-bench"
NOW = datetime(2026, 5, 9, 12, 0, tzinfo=UTC)
REQUIRED = {
    Capability.TOOL_CALLING.value: 0.85,
    Capability.JSON_SCHEMA.value: 0.8,
    Capability.PATCH_SUCCESS.value: 0.6,
    Capability.AGENT_TASK_SUCCESS.value: 0.55,
    Capability.RELIABLE_CONTEXT.value: 0.7,
}
PROVIDERS = ["anthropic", "azure-openai", "openai", "mistral", "vllm", "blocked-ai"]
PROVIDER_WEIGHTS = [25, 25, 20, 15, 12, 3]
REGIONS = ["westeurope", "northeurope", "eastus", "global", "tenant-pool"]
REGION_WEIGHTS = [35, 25, 8, 22, 10]  # tenant policy refuses eastus


def build_catalog(n: int, refusals: bool, seed: int = 7) -> tuple[CatalogSnapshot, ModelProfile]:
    """`refusals`: a realistic mix of refused deployments; otherwise every one is eligible,
    which is the most work per decision (every deployment is scored and sorted)."""
    rng = random.Random(seed)
    odds = (lambda p: rng.random() < p) if refusals else (lambda p: False)
    deployments: list[dict[str, Any]] = []
    scores: list[dict[str, Any]] = []
    stats: list[dict[str, Any]] = []
    prices: dict[tuple[str, str], dict[str, Any]] = {}
    for i in range(n):
        dep_id = f"dep-{i:05d}"
        provider = rng.choices(
            PROVIDERS[:-1] if not refusals else PROVIDERS,
            PROVIDER_WEIGHTS[:5] if not refusals else PROVIDER_WEIGHTS,
        )[0]
        model = f"{provider}-model-{rng.randrange(40)}"
        region = rng.choices(REGIONS, REGION_WEIGHTS)[0] if refusals else "westeurope"
        privacy = rng.choices(["External", "Regional", "Confidential", "Local"], [15, 45, 30, 10])[
            0
        ]
        deployments.append(
            {
                "deploymentId": dep_id,
                "tenantId": TENANT,
                "provider": provider,
                "model": model,
                "region": region,
                "privacyClass": privacy if refusals or privacy != "External" else "Regional",
                "state": "Evaluated" if odds(0.03) else "Degraded" if odds(0.03) else "Approved",
                "healthy": not odds(0.02),
                "computePoolId": f"pool-{i % 7}" if provider == "vllm" else None,
                "contextWindowTokens": 32_000 if odds(0.05) else rng.choice([128_000, 200_000]),
            }
        )
        for cap in Capability:
            weak = odds(0.01)
            scores.append(
                {
                    "tenantId": TENANT,
                    "deploymentId": dep_id,
                    "capability": cap.value,
                    "verdict": "fail" if weak else "pass",
                    "score": round(rng.uniform(0.3, 0.6) if weak else rng.uniform(0.85, 1.0), 4),
                    "evaluatedAt": NOW,
                    "suiteVersion": "2026.05",
                }
            )
        if rng.random() < 0.9:
            attempts = rng.randrange(0, 5000)
            stats.append(
                {
                    "tenantId": TENANT,
                    "deploymentId": dep_id,
                    "latencyP50Ms": rng.uniform(150, 900),
                    "latencyP95Ms": rng.uniform(400, 4000),
                    "latencySamples": rng.randrange(1, 500),
                    "attempts": attempts,
                    "successes": int(attempts * rng.uniform(0.9, 1.0)),
                }
            )
        if (provider, model) not in prices and not odds(0.02):
            prices[(provider, model)] = {
                "provider": provider,
                "model": model,
                "inputUsdPerMtok": str(round(rng.uniform(0.1, 15), 2)),
                "outputUsdPerMtok": str(round(rng.uniform(0.4, 75), 2)),
                "effectiveFrom": "2026-01-01",
            }
    policy = TenantPolicy(
        tenant_id=TENANT,
        revision="bench-1",
        allowed_privacy_classes={
            DataClassification.INTERNAL: frozenset(PrivacyClass),
        },
        allowed_regions=frozenset({"westeurope", "northeurope", "global", "tenant-pool"}),
        denied_providers=frozenset({"blocked-ai"}),
    )
    profile = ModelProfile(
        profile_id="code-agent",
        version="3",
        release_id="rel-3",
        tenant_id=TENANT,
        modality=Modality.CHAT,
        required_capabilities=REQUIRED,
        privacy_class=PrivacyClass.REGIONAL,
        latency_class=LatencyClass.INTERACTIVE,
        max_context_tokens=100_000,
        max_output_tokens=8_000,
        allowed_regions=[],
        allowed_deployments=[d["deploymentId"] for d in deployments],
        fallback_chain=[],
        fallback_enabled=False,
        price_basis="prices-2026-05",
    )
    snapshot = CatalogSnapshot.build(
        version=1,
        deployments=deployments,
        capabilityScores=scores,
        stats=stats,
        pricebooks=[{"revision": "prices-2026-05", "entries": list(prices.values())}],
        tenantPolicies=[policy],
        pools=[{"poolId": "pool-3", "state": "Draining"}] if refusals else [],
        profiles=[profile],
    )
    own = snapshot.profile(TENANT, "code-agent", "3")
    assert own is not None
    return snapshot, own


def measure(
    fn: Callable[[], object], iterations: int, setup: Callable[[], object] | None = None
) -> list[int]:
    for _ in range(min(200, iterations)):
        if setup:
            setup()
        fn()
    gc.collect()
    samples = []
    clock = time.perf_counter_ns
    for _ in range(iterations):
        if setup:
            setup()
        t0 = clock()
        fn()
        samples.append(clock() - t0)
    return samples


def pct(samples: list[int], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1000


SIZES = ((10, 20_000), (100, 5_000), (1_000, 1_000))  # deployments, timed calls
ROUNDS = 5


@dataclass
class Case:
    n: int
    refusals: bool
    iterations: int
    snapshot: CatalogSnapshot
    profile: ModelProfile
    build_ms: float
    warm: list[int] = field(default_factory=list)
    round_p50s: list[float] = field(default_factory=list)

    def plan(self) -> Any:
        return plan_route(self.snapshot, self.profile, REQUEST, now=NOW)

    def plan_and_record(self) -> Any:
        return self.plan().to_result()


REQUEST = PlanRequest(
    tenant_id=TENANT,
    data_classification=DataClassification.INTERNAL,
    needs_tools=True,
    needs_structured_output=True,
    budget_applies=True,
)


def run(quick: bool) -> list[dict[str, Any]]:
    cases = []
    for refusals in (True, False):
        for n, iterations in SIZES:
            t0 = time.perf_counter_ns()
            snapshot, profile = build_catalog(n, refusals)
            build_ms = (time.perf_counter_ns() - t0) / 1e6
            calls = max(100, iterations // 20) if quick else iterations
            cases.append(Case(n, refusals, calls, snapshot, profile, build_ms))
    # Rounds interleave the cases, so a burst from another process on a shared machine lands
    # on all of them rather than on one size; the spread of the round medians shows the noise.
    for _ in range(1 if quick else ROUNDS):
        for case in cases:
            samples = measure(case.plan, case.iterations // (1 if quick else ROUNDS))
            case.warm += samples
            case.round_p50s.append(pct(samples, 0.5))
    rows = []
    for case in cases:
        decision = case.plan()
        full = measure(case.plan_and_record, max(50, case.iterations // 10))
        # The first decision for a tenant policy, data classification and weights also admits
        # the cohort through the policy and gathers score columns; later ones reuse them.
        # Clearing the cohort's memo replays that.
        cohort = case.snapshot.cohort(TENANT, case.profile)
        first = measure(case.plan, max(50, case.iterations // 10), setup=cohort.memo.clear)
        row = {
            "n": case.n,
            "scenario": "mixed refusals" if case.refusals else "all eligible",
            "iterations": len(case.warm),
            "kept": len(decision.candidate_ids),
            "p50": pct(case.warm, 0.50),
            "p95": pct(case.warm, 0.95),
            "p99": pct(case.warm, 0.99),
            "mean": statistics.fmean(case.warm) / 1000,
            "round_min": min(case.round_p50s),
            "round_max": max(case.round_p50s),
            "full_p50": pct(full, 0.50),
            "first_p50": pct(first, 0.50),
            "build_ms": case.build_ms,
        }
        rows.append(row)
        print(
            f"{row['scenario']:>15} n={case.n:>5}  plan p50 {row['p50']:7.1f} µs "
            f"(rounds {row['round_min']:.0f}-{row['round_max']:.0f})  p95 {row['p95']:7.1f}  "
            f"p99 {row['p99']:7.1f}  | first {row['first_p50']:7.1f}  "
            f"| +to_result() {row['full_p50']:8.1f}  | kept {row['kept']}/{case.n}  "
            f"| build {row['build_ms']:.0f} ms"
        )
    return rows


def section(rows: list[dict[str, Any]], load: float, yardstick: tuple[float, float]) -> str:
    def met(n: int, limit: float) -> str:
        worst = max(r["p50"] for r in rows if r["n"] == n)
        return f"{'met' if worst < limit else 'NOT met'}, worst p50 {worst:.0f} µs"

    lines = [
        START,
        "## Route planner (`bench/bench_planner.py`)",
        "",
        f"Date {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')} · nproc {os.cpu_count()} · "
        f"Python {platform.python_version()} ({platform.machine()}, {platform.system()}) · "
        f"load average at start {load:.2f} · yardstick `sum(range(1000))` "
        f"{yardstick[0]:.1f} µs before and {yardstick[1]:.1f} µs after the run.",
        "",
        "`plan_route` on a compiled snapshot whose profile lists every deployment (the planner "
        "looks at all of them). The request needs tools and structured output under a budget. "
        "*Mixed refusals*: about 35% are refused (lifecycle, pool, privacy, tenant policy, "
        "thresholds, context window, no price under budget). *All eligible*: every deployment "
        "is scored and sorted, the most work per decision. One call per sample, "
        f"`time.perf_counter_ns`, after warm-up, GC enabled, in {ROUNDS} rounds that "
        "interleave the cases; p50/p95/p99 over all samples.",
        "",
        "| scenario | deployments | kept | samples | p50 µs | p95 µs | p99 µs | mean µs "
        "| p50 range over rounds | first decision p50 µs | p50 µs incl. `to_result()` "
        "| snapshot build ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['scenario']} | {r['n']:,} | {r['kept']:,} | {r['iterations']:,} "
            f"| {r['p50']:.1f} | {r['p95']:.1f} | {r['p99']:.1f} | {r['mean']:.1f} "
            f"| {r['round_min']:.0f} to {r['round_max']:.0f} "
            f"| {r['first_p50']:.1f} | {r['full_p50']:.1f} | {r['build_ms']:.1f} |"
        )
    lines += [
        "",
        f"Targets (p50): under 100 µs at 100 deployments ({met(100, 100)}); under 1 ms at "
        f"1,000 ({met(1000, 1000)}).",
        "",
        "- The machine is a shared 2-vCPU VM whose speed drifts with its neighbours: the same "
        "build measured between about 15 and 30 µs on the yardstick during development, and "
        "plan medians moved with it by up to 2x between runs (see the round range).",
        "- *first decision*: the first decision of a snapshot for a tenant policy, data "
        "classification and set of weights also runs the tenant policy over the cohort and "
        "gathers the admitted deployments' score columns; later ones reuse both.",
        "- *incl. `to_result()`*: also builds the pydantic record (an object per candidate and "
        "exclusion, for the preview endpoint). ResolveRoutePlan needs only the ordered ids, "
        "constraints and decision id, which `plan_route` returns directly.",
        "- *snapshot build*: validating the plain values and compiling indexes and cohorts, once "
        "per catalog change (13 capability scores per deployment).",
        END,
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer iterations, no doc update")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    before = calibrate()
    rows = run(args.quick)
    yardstick = (before, calibrate())
    print(f"yardstick sum(range(1000)): {yardstick[0]:.1f} µs before, {yardstick[1]:.1f} after")
    if not args.quick:
        write_section(section(rows, load, yardstick), START, END)
        print(f"wrote {DOC.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
