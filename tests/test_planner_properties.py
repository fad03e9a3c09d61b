"""Properties of the route planner over generated catalogs, profiles, policies and requests."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.catalog import CapabilityScore, PoolState, PoolStatus
from domain.constraints import satisfies_constraints
from domain.enums import DeploymentState, PrivacyClass
from domain.exclusions import ExclusionCode
from domain.planner import PlanRequest, plan_route
from domain.policy import DataClassification, PolicyVerdict, TenantPolicy
from domain.pricing import Pricebook
from domain.profiles import ModelProfile
from domain.route_plan import RoutePlanDecision
from domain.scoring import DEFAULT_WEIGHTS, Weights
from domain.snapshot import CatalogSnapshot
from tests.test_planner import NOW, Spec, T, build, make_profile

PROVIDERS = ["anthropic", "openai", "acme"]
REGIONS = ["westeurope", "eastus", "global"]
CAPS = ["tool-calling", "json-schema", "planning"]
POOLS = ["p1", "p2"]
APPROVED = DeploymentState.APPROVED
SETTINGS = settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)


@dataclass
class Scenario:
    specs: list[Spec]
    profile: ModelProfile
    policy: TenantPolicy | None
    pools: list[PoolStatus]
    request: PlanRequest
    weights: Weights
    # Other evaluations of the same capabilities: older ones, and same-day reruns of another
    # suite version, so which score counts must not depend on input order.
    history: list[CapabilityScore]

    def snapshot(self, specs: list[Spec] | None = None) -> CatalogSnapshot:
        return build(
            self.specs if specs is None else specs,
            profiles=[self.profile],
            policies=[] if self.policy is None else [self.policy],
            pools=self.pools,
            extra_scores=self.history,
        )

    def plan(self, snapshot: CatalogSnapshot | None = None) -> RoutePlanDecision:
        snap = snapshot or self.snapshot()
        return plan_route(snap, self.profile, self.request, now=NOW, weights=self.weights)


def mostly(rng: random.Random, usual: Any, others: list[Any], percent: int) -> Any:
    """`usual` about `percent`% of the time, so plans usually keep candidates to check the
    properties on."""
    return usual if rng.random() * 100 < percent else rng.choice(others)


def subset(rng: random.Random, items: list[Any]) -> frozenset[Any]:
    return frozenset(x for x in items if rng.random() < 0.5)


def make_specs(rng: random.Random, n: int) -> list[Spec]:
    out = []
    for i in range(n):
        caps: dict[str, float | None] = {}
        verdicts: dict[str, str] = {}
        for cap in CAPS:
            if rng.random() < 0.04:
                continue  # no evidence for this capability
            caps[cap] = mostly(rng, rng.choice([0.9, 0.95, 1.0, None]), [0.4, 0.6, 0.75], 95)
            verdicts[cap] = mostly(rng, "pass", ["fail"], 96)
        cents = (rng.randint(1, 5000), rng.randint(1, 5000))
        attempts = rng.randint(0, 200)
        out.append(
            Spec(
                id=f"d{i}",
                provider=rng.choice(PROVIDERS),
                region=rng.choice(REGIONS),
                privacy=rng.choice(list(PrivacyClass)),
                state=mostly(rng, APPROVED, list(DeploymentState), 92),
                healthy=mostly(rng, True, [False], 95),
                pool=mostly(rng, None, POOLS, 70),
                context=mostly(rng, 200_000, [None, 32_000, 128_000], 92),
                caps=caps,
                verdicts=verdicts,
                price=mostly(rng, (str(cents[0] / 100), str(cents[1] / 100)), [None], 90),
                p95_ms=mostly(rng, float(rng.randint(50, 5000)), [None], 90),
                attempts=attempts,
                successes=rng.randint(0, attempts),
            )
        )
    return out


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    """The shape (size, preference order, request, weights) comes from Hypothesis; the many
    per-deployment attributes from one seeded Random, which keeps generation fast and avoids
    Hypothesis' deliberate reuse of a drawn value across an example (which would make every
    deployment of an example unhealthy at once)."""
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    specs = make_specs(rng, rng.randint(1, 10))
    ids = [s.id for s in specs]
    listed = draw(st.permutations(ids))[: rng.randint(min(2, len(ids)), len(ids))]
    if rng.random() < 0.25:
        listed.insert(rng.randint(0, len(listed)), "ghost")
    every_class = frozenset(PrivacyClass)
    profile = make_profile(
        listed,
        required={c: rng.choice([0.5, 0.7, 0.9]) for c in sorted(subset(rng, CAPS))},
        privacy=mostly(rng, PrivacyClass.EXTERNAL, list(PrivacyClass), 80),
        regions=sorted(mostly(rng, frozenset(), [subset(rng, REGIONS)], 80)),
        max_context=rng.choice([64_000, 128_000]),
    )
    policy = None
    if rng.random() < 0.9:
        policy = TenantPolicy(
            tenant_id=T,
            revision=f"rev-{rng.randint(1, 3)}",
            allowed_privacy_classes={
                dc: mostly(rng, every_class, [subset(rng, list(PrivacyClass))], 80)
                for dc in DataClassification
            },
            allowed_regions=mostly(rng, None, [subset(rng, REGIONS)], 90),
            allowed_providers=mostly(rng, None, [subset(rng, PROVIDERS)], 90),
            denied_providers=mostly(rng, frozenset(), [subset(rng, PROVIDERS)], 90),
            external_may_see_confidential=rng.random() < 0.5,
        )
    pools = [
        PoolStatus(pool_id=p, state=mostly(rng, PoolState.READY, list(PoolState), 60))
        for p in POOLS
        if rng.random() < 0.5
    ]
    request = PlanRequest(
        tenant_id=T,
        data_classification=draw(st.sampled_from(list(DataClassification))),
        needs_tools=draw(st.booleans()),
        needs_structured_output=draw(st.booleans()),
        context_tokens=mostly(rng, None, [100_000, 180_000], 75),
        budget_applies=draw(st.booleans()),
    )
    weights = DEFAULT_WEIGHTS
    if draw(st.booleans()):
        raw = [draw(st.integers(0, 10)) for _ in range(3)]
        cost = draw(st.integers(1, 10))  # cost > 0, so price differences always count
        total = sum(raw) + cost
        weights = Weights(
            capability=raw[0] / total,
            cost=1.0 - (raw[0] + raw[1] + raw[2]) / total,
            latency=raw[1] / total,
            history=raw[2] / total,
        )
    history = [
        CapabilityScore(
            tenant_id=T,
            deployment_id=spec.id,
            capability=cap,
            verdict=rng.choice(["pass", "fail"]),
            score=rng.choice([None, 0.3, 0.99]),
            evaluated_at=NOW - timedelta(days=rng.choice([1, 30])),
            suite_version=rng.choice(["s0", "s2"]),
        )
        for spec in specs
        for cap in CAPS
        if rng.random() < 0.2
    ]
    return Scenario(specs, profile, policy, pools, request, weights, history)


def dump(decision: RoutePlanDecision) -> dict[str, Any]:
    return decision.to_result().model_dump(mode="json")


@SETTINGS
@given(scenarios())
def test_same_inputs_same_plan(s: Scenario) -> None:
    snap = s.snapshot()
    first = dump(s.plan(snap))
    assert dump(s.plan(snap)) == first
    assert dump(s.plan(s.snapshot())) == first  # a fresh snapshot of the same data, too


@SETTINGS
@given(scenarios())
def test_every_candidate_satisfies_the_plan_constraints(s: Scenario) -> None:
    snap = s.snapshot()
    d = s.plan(snap)
    policy = snap.policy(T)
    for dep_id in d.candidate_ids:
        assert satisfies_constraints(snap, T, dep_id, d.constraints)
        dep = snap.deployment(T, dep_id)
        assert dep is not None
        assert dep.state is DeploymentState.APPROVED and dep.healthy
        assert dep.privacy_class.at_least_as_strict_as(s.profile.privacy_class)
        assert policy is not None
        verdict = policy.verdict(
            s.request.data_classification, dep.privacy_class, dep.provider, dep.region
        )
        assert verdict is PolicyVerdict.ALLOW
    assert list(d.scores) == sorted(d.scores, reverse=True)
    # Whichever path computed them, scores are the weighted sums of the terms shown.
    w = s.weights
    for score, t in zip(d.scores, d.terms(), strict=True):
        expected = (
            w.capability * t.capability + w.cost * t.cost + w.latency * t.latency
        ) + w.history * t.history
        assert abs(score - expected) < 1e-9


@SETTINGS
@given(scenarios(), st.integers(0, 2**32 - 1))
def test_shuffling_input_lists_changes_nothing(s: Scenario, seed: int) -> None:
    rnd = random.Random(seed)
    expected = dump(s.plan())
    snap = s.snapshot()
    data = snap.data

    def shuffled(items: tuple[Any, ...]) -> list[Any]:
        out = list(items)
        rnd.shuffle(out)
        return out

    books = [
        Pricebook(revision=b.revision, entries=tuple(shuffled(b.entries))) for b in data.pricebooks
    ]
    reshuffled = CatalogSnapshot(
        data.model_copy(
            update={
                "deployments": tuple(shuffled(data.deployments)),
                "capability_scores": tuple(shuffled(data.capability_scores)),
                "stats": tuple(shuffled(data.stats)),
                "pricebooks": tuple(books),
                "pools": tuple(shuffled(data.pools)),
                "profiles": tuple(shuffled(data.profiles)),
            }
        )
    )
    assert dump(s.plan(reshuffled)) == expected


@SETTINGS
@given(scenarios(), st.data())
def test_an_identical_but_cheaper_deployment_never_ranks_below(s: Scenario, data: Any) -> None:
    kept = set(s.plan().candidate_ids)
    priced = [x for x in s.specs if x.price is not None and x.id in s.profile.allowed_deployments]
    if not priced:
        return
    # Prefer a deployment the plan keeps: that is where the ranking claim has teeth.
    original = data.draw(st.sampled_from([x for x in priced if x.id in kept] or priced))
    assert original.price is not None
    cheaper = (str(float(original.price[0]) / 2), str(float(original.price[1]) / 2))
    twin = dataclasses.replace(original, id="twin", model="twin-model", price=cheaper)
    # Listed last, so the preference tie-break is against it: only its score can lift it.
    profile = s.profile.model_copy(
        update={"allowed_deployments": [*s.profile.allowed_deployments, "twin"]}
    )
    twin_history = [
        h.model_copy(update={"deployment_id": "twin"})
        for h in s.history
        if h.deployment_id == original.id
    ]
    s = dataclasses.replace(
        s, specs=[*s.specs, twin], profile=profile, history=[*s.history, *twin_history]
    )
    d = s.plan()
    ids = list(d.candidate_ids)
    assert ("twin" in ids) == (original.id in ids)
    if original.id in ids:
        assert ids.index("twin") < ids.index(original.id)
    else:
        codes = {e.deployment_id: e.code for e in d.exclusions()}
        assert codes["twin"] == codes[original.id]


@SETTINGS
@given(scenarios())
def test_every_listed_deployment_is_kept_or_excluded_with_a_reason(s: Scenario) -> None:
    d = s.plan()
    excluded = d.exclusions()
    listed = list(dict.fromkeys(s.profile.allowed_deployments))
    assert sorted([*d.candidate_ids, *(e.deployment_id for e in excluded)]) == sorted(listed)
    for e in excluded:
        assert isinstance(e.code, ExclusionCode)
        assert e.reason.strip()
    assert [e.deployment_id for e in excluded] == [x for x in listed if x in d.excluded_ids]


@SETTINGS
@given(scenarios(), st.data())
def test_below_a_threshold_is_never_a_candidate_however_cheap(s: Scenario, data: Any) -> None:
    required = dict(s.profile.required_capabilities) or {"planning": 0.7}
    short = data.draw(st.sampled_from(sorted(required)))
    caps: dict[str, float | None] = {c: 1.0 for c in CAPS}
    caps[short] = required[short] - 0.01
    weak = Spec(
        "weak",
        provider="anthropic",
        privacy=PrivacyClass.LOCAL,
        caps=caps,
        price=("0", "0"),
        p95_ms=1.0,
        attempts=10_000,
        successes=10_000,
    )
    profile = s.profile.model_copy(
        update={
            "required_capabilities": required,
            "allowed_deployments": ["weak", *s.profile.allowed_deployments],
        }
    )
    s = dataclasses.replace(s, specs=[*s.specs, weak], profile=profile)
    d = s.plan()
    assert "weak" not in d.candidate_ids
    assert "weak" in d.excluded_ids
