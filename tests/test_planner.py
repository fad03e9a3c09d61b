"""The route planner, its policy, pricing, snapshot and scoring: pure, so no fixtures needed."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from pydantic import ValidationError

from domain.approval import evidence_refusals
from domain.catalog import (
    CapabilityScore,
    CatalogDeployment,
    DeploymentStats,
    PoolState,
    PoolStatus,
)
from domain.constraints import satisfies_constraints
from domain.deployments import DeploymentRecord
from domain.enums import DeploymentState, LatencyClass, Modality, PrivacyClass, ProfileStatus
from domain.exclusions import ExclusionCode
from domain.planner import NO_POLICY_REVISION, PlanRequest, plan_route
from domain.policy import DataClassification, TenantPolicy, baseline_policy
from domain.pricing import (
    COST_MAX,
    Pricebook,
    PriceEntry,
    estimate_cost_usd,
    receipt_cost_usd,
    worst_case_cost_usd,
)
from domain.profiles import ModelProfile
from domain.route_plan import RoutePlanDecision, RoutePlanResult
from domain.scoring import DEFAULT_WEIGHTS, NEUTRAL, Weights
from domain.snapshot import CatalogSnapshot, ProfileNotVisible

T = "tenant-a"
NOW = datetime(2026, 5, 9, 12, 0, tzinfo=UTC)
PB = "pb-2026-05"
DC = DataClassification
PC = PrivacyClass
Code = ExclusionCode


# -- builders (also used by test_planner_properties) -----------------------------------------


@dataclass
class Spec:
    """One deployment with its evidence, stats and price, in a line of test code."""

    id: str
    provider: str = "anthropic"
    model: str | None = None
    region: str = "westeurope"
    privacy: PrivacyClass = PC.REGIONAL
    state: DeploymentState = DeploymentState.APPROVED
    healthy: bool = True
    pool: str | None = None
    context: int | None = 200_000
    caps: Mapping[str, float | None] = field(default_factory=lambda: {"tool-calling": 0.9})
    verdicts: dict[str, str] = field(default_factory=dict)
    price: tuple[str, str] | None = ("1", "2")  # USD per Mtok: input, output
    p95_ms: float | None = 500.0
    attempts: int = 100
    successes: int = 99
    tenant: str = T

    @property
    def model_name(self) -> str:
        return self.model or f"model-{self.id}"

    def deployment(self) -> CatalogDeployment:
        return CatalogDeployment(
            deployment_id=self.id,
            tenant_id=self.tenant,
            provider=self.provider,
            model=self.model_name,
            region=self.region,
            privacy_class=self.privacy,
            state=self.state,
            healthy=self.healthy,
            compute_pool_id=self.pool,
            context_window_tokens=self.context,
        )

    def scores(self) -> list[CapabilityScore]:
        return [
            CapabilityScore(
                tenant_id=self.tenant,
                deployment_id=self.id,
                capability=cap,
                verdict=self.verdicts.get(cap, "pass"),
                score=score,
                evaluated_at=NOW - timedelta(days=1),
                suite_version="s1",
            )
            for cap, score in self.caps.items()
        ]

    def stats(self) -> DeploymentStats:
        return DeploymentStats(
            tenant_id=self.tenant,
            deployment_id=self.id,
            latency_p95_ms=self.p95_ms,
            latency_samples=0 if self.p95_ms is None else 50,
            attempts=self.attempts,
            successes=self.successes,
        )

    def price_entry(self) -> PriceEntry | None:
        if self.price is None:
            return None
        return PriceEntry(
            provider=self.provider,
            model=self.model_name,
            input_usd_per_mtok=Decimal(self.price[0]),
            output_usd_per_mtok=Decimal(self.price[1]),
            effective_from=date(2026, 1, 1),
        )


def make_profile(
    allowed: list[str],
    *,
    required: dict[str, float] | None = None,
    privacy: PrivacyClass = PC.REGIONAL,
    regions: list[str] | None = None,
    max_context: int = 100_000,
    max_output: int = 8_000,
    tenant: str = T,
    version: str = "1",
    profile_id: str = "code-agent",
) -> ModelProfile:
    return ModelProfile(
        profile_id=profile_id,
        version=version,
        release_id=f"rel-{version}",
        tenant_id=tenant,
        modality=Modality.CHAT,
        required_capabilities={"tool-calling": 0.8} if required is None else required,
        privacy_class=privacy,
        latency_class=LatencyClass.INTERACTIVE,
        max_context_tokens=max_context,
        max_output_tokens=max_output,
        allowed_regions=regions or [],
        allowed_deployments=allowed,
        fallback_chain=[],
        fallback_enabled=False,
        price_basis=PB,
    )


def open_policy(tenant: str = T, **over: Any) -> TenantPolicy:
    """Every privacy class for every classification; tests narrow what they exercise."""
    values: dict[str, Any] = {
        "tenant_id": tenant,
        "revision": "rev-1",
        "allowed_privacy_classes": {dc: frozenset(PC) for dc in DC},
        "external_may_see_confidential": True,
    }
    values.update(over)
    return TenantPolicy(**values)


def build(
    specs: list[Spec],
    *,
    profiles: Sequence[ModelProfile] = (),
    policies: Sequence[TenantPolicy] | None = None,
    pools: Sequence[PoolStatus] = (),
    version: int = 1,
    shared: frozenset[str] = frozenset(),
    extra_prices: Sequence[PriceEntry] = (),
    extra_scores: Sequence[CapabilityScore] = (),
) -> CatalogSnapshot:
    prices = {(p.provider, p.model, p.effective_from): p for s in specs if (p := s.price_entry())}
    for p in extra_prices:
        prices[(p.provider, p.model, p.effective_from)] = p
    return CatalogSnapshot.build(
        version=version,
        deployments=[s.deployment() for s in specs],
        capability_scores=[c for s in specs for c in s.scores()] + list(extra_scores),
        stats=[s.stats() for s in specs],
        pricebooks=[Pricebook(revision=PB, entries=tuple(prices.values()))],
        tenant_policies=[open_policy()] if policies is None else list(policies),
        pools=list(pools),
        profiles=list(profiles),
        shared_tenant_ids=shared,
    )


def plan(
    specs: list[Spec],
    *,
    profile: ModelProfile | None = None,
    weights: Weights = DEFAULT_WEIGHTS,
    now: datetime = NOW,
    snapshot_kw: dict[str, Any] | None = None,
    **request: Any,
) -> RoutePlanDecision:
    prof = profile or make_profile([s.id for s in specs])
    snap = build(specs, profiles=[prof], **(snapshot_kw or {}))
    values: dict[str, Any] = {"tenant_id": T, "data_classification": DC.INTERNAL}
    values.update(request)
    return plan_route(snap, prof, PlanRequest(**values), now=now, weights=weights)


def excluded(decision: RoutePlanDecision) -> dict[str, tuple[ExclusionCode, str, dict[str, Any]]]:
    return {e.deployment_id: (e.code, e.reason, e.detail) for e in decision.exclusions()}


def code_of(decision: RoutePlanDecision, dep_id: str) -> ExclusionCode:
    return excluded(decision)[dep_id][0]


# -- one test per exclusion reason ------------------------------------------------------------


def test_listed_but_missing_is_not_in_catalog_and_unlisted_is_ignored() -> None:
    d = plan([Spec("a"), Spec("b")], profile=make_profile(["a", "ghost"]))
    assert d.candidate_ids == ("a",)
    assert code_of(d, "ghost") is Code.NOT_IN_CATALOG
    assert "b" not in excluded(d)  # not listed by the profile: not considered at all


@pytest.mark.parametrize(
    "state", [DeploymentState.CANDIDATE, DeploymentState.EVALUATED, DeploymentState.RETIRED]
)
def test_not_approved(state: DeploymentState) -> None:
    d = plan([Spec("a", state=state), Spec("b")])
    code, reason, detail = excluded(d)["a"]
    assert code is Code.NOT_APPROVED
    assert reason == f"deployment is {state.value}, not Approved"
    assert detail["state"] == state.value


def test_unhealthy_and_degraded() -> None:
    d = plan([Spec("a", healthy=False), Spec("b", state=DeploymentState.DEGRADED), Spec("c")])
    assert code_of(d, "a") is Code.UNHEALTHY
    assert code_of(d, "b") is Code.UNHEALTHY
    assert d.candidate_ids == ("c",)


def test_pool_draining_offline_and_unknown() -> None:
    pools = [
        PoolStatus(pool_id="p1", state=PoolState.DRAINING),
        PoolStatus(pool_id="p2", state=PoolState.OFFLINE),
        PoolStatus(pool_id="p3", state=PoolState.READY),
    ]
    specs = [Spec(x, pool=p) for x, p in [("a", "p1"), ("b", "p2"), ("c", "p3"), ("d", "p4")]]
    d = plan(specs, snapshot_kw={"pools": pools})
    assert excluded(d)["a"][:2] == (Code.POOL_DRAINING, "pool draining (compute pool p1)")
    assert code_of(d, "b") is Code.POOL_OFFLINE
    # No status reported for p4: ComputePoolService is a degrade-mode dependency.
    assert set(d.candidate_ids) == {"c", "d"}


def test_privacy_class_weaker_than_profile() -> None:
    d = plan([Spec("a", privacy=PC.EXTERNAL), Spec("b", privacy=PC.LOCAL)])
    code, _, detail = excluded(d)["a"]
    assert code is Code.PRIVACY_BELOW_PROFILE
    assert detail == {"privacyClass": "External", "profilePrivacyClass": "Regional"}
    assert d.candidate_ids == ("b",)


def test_privacy_class_not_allowed_by_tenant_policy() -> None:
    policy = open_policy(allowed_privacy_classes={DC.INTERNAL: frozenset({PC.REGIONAL, PC.LOCAL})})
    prof = make_profile(["openai/global/coding", "b"], privacy=PC.EXTERNAL)
    specs = [Spec("openai/global/coding", privacy=PC.EXTERNAL, provider="openai"), Spec("b")]
    d = plan(specs, profile=prof, snapshot_kw={"policies": [policy]})
    code, reason, detail = excluded(d)["openai/global/coding"]
    assert code is Code.PRIVACY_DENIED_BY_POLICY
    assert reason == "privacy class External not allowed by tenant policy"
    assert detail["dataClassification"] == "Internal"
    assert detail["policyRevision"] == "rev-1"
    assert d.candidate_ids == ("b",)


def test_a_classification_the_policy_does_not_mention_allows_nothing() -> None:
    policy = open_policy(allowed_privacy_classes={DC.PUBLIC: frozenset(PC)})
    d = plan([Spec("a")], snapshot_kw={"policies": [policy]})
    assert code_of(d, "a") is Code.PRIVACY_DENIED_BY_POLICY


def test_external_providers_never_see_confidential_data_unless_policy_says_so() -> None:
    prof = make_profile(["ext"], privacy=PC.EXTERNAL)
    specs = [Spec("ext", privacy=PC.EXTERNAL)]
    lists_external = {dc: frozenset(PC) for dc in DC}
    strict = open_policy(
        allowed_privacy_classes=lists_external, external_may_see_confidential=False
    )
    d = plan(
        specs, profile=prof, snapshot_kw={"policies": [strict]}, data_classification=DC.RESTRICTED
    )
    code, reason, _ = excluded(d)["ext"]
    assert code is Code.CONFIDENTIAL_TO_EXTERNAL
    assert reason == "tenant policy keeps Restricted data from external providers"
    # Public data is not confidential: the flag does not apply.
    public = plan(
        specs, profile=prof, snapshot_kw={"policies": [strict]}, data_classification=DC.PUBLIC
    )
    assert public.candidate_ids == ("ext",)
    allowed = open_policy(allowed_privacy_classes=lists_external)
    ok = plan(
        specs,
        profile=prof,
        snapshot_kw={"policies": [allowed]},
        data_classification=DC.CONFIDENTIAL,
    )
    assert ok.candidate_ids == ("ext",)


def test_provider_denied_by_policy() -> None:
    specs = [Spec("a", provider="acme"), Spec("b", provider="anthropic"), Spec("c", provider="x")]
    policy = open_policy(
        denied_providers=frozenset({"acme"}), allowed_providers=frozenset({"acme", "anthropic"})
    )
    d = plan(specs, snapshot_kw={"policies": [policy]})
    assert excluded(d)["a"][:2] == (Code.PROVIDER_DENIED, "provider acme denied by tenant policy")
    assert excluded(d)["c"][0] is Code.PROVIDER_DENIED  # not among the allowed providers
    assert excluded(d)["c"][2]["listedAsDenied"] is False
    assert d.candidate_ids == ("b",)


def test_region_denied_by_policy_and_region_outside_profile() -> None:
    specs = [Spec("a", region="eastus"), Spec("b", region="northeurope"), Spec("c")]
    policy = open_policy(allowed_regions=frozenset({"westeurope", "northeurope"}))
    prof = make_profile(["a", "b", "c"], regions=["westeurope"])
    d = plan(specs, profile=prof, snapshot_kw={"policies": [policy]})
    assert excluded(d)["a"][:2] == (
        Code.REGION_DENIED_BY_POLICY,
        "region eastus not allowed by tenant policy",
    )
    assert code_of(d, "b") is Code.REGION_NOT_IN_PROFILE
    assert d.candidate_ids == ("c",)
    assert d.constraints.regions == ("westeurope",)


def test_capability_below_threshold_carries_the_numbers() -> None:
    specs = [Spec("weak", caps={"tool-calling": 0.72}), Spec("ok", caps={"tool-calling": 0.8})]
    d = plan(specs)
    code, reason, detail = excluded(d)["weak"]
    assert code is Code.CAPABILITY_BELOW_THRESHOLD
    assert reason == "capability tool-calling below threshold: measured 0.72, threshold 0.8"
    assert detail == {
        "capability": "tool-calling",
        "threshold": 0.8,
        "measured": 0.72,
        "verdict": "pass",
        "requiredBy": "profile",
    }
    assert d.candidate_ids == ("ok",)  # exactly at the threshold passes


def test_a_threshold_is_judged_as_the_approval_gate_judges_it() -> None:
    """The suite's verdict is its measure against its own default (0.8): a profile asking 0.7
    of a deployment measured at 0.75 had it approved by the gate, and routing, which also
    asked for the verdict, never served it. One rule now (CapabilityScore.meets)."""
    ids = ["below-default", "unscored-fail", "no-measure", "unmeasured", "binary"]
    specs = [
        Spec("below-default", caps={"tool-calling": 0.75}, verdicts={"tool-calling": "fail"}),
        # A pass/fail check without a number that failed counts as 0.0.
        Spec("unscored-fail", caps={"tool-calling": None}, verdicts={"tool-calling": "fail"}),
        # A verdict the suite never writes (an import's) is no measure at all.
        Spec("no-measure", caps={"tool-calling": 0.99}, verdicts={"tool-calling": "error"}),
        Spec("unmeasured", caps={}),
        Spec("binary", caps={"tool-calling": None}),  # a pass without a number counts as 1.0
    ]
    profile = make_profile(ids, required={"tool-calling": 0.7})
    d = plan(specs, profile=profile)
    assert set(d.candidate_ids) == {"below-default", "binary"}
    assert code_of(d, "unscored-fail") is Code.CAPABILITY_BELOW_THRESHOLD
    assert code_of(d, "no-measure") is Code.CAPABILITY_BELOW_THRESHOLD
    assert "failed evaluation (verdict error" in excluded(d)["no-measure"][1]
    assert code_of(d, "unmeasured") is Code.CAPABILITY_UNMEASURED
    # The approval gate says the same of the same numbers.
    assert evidence_refusals({"tool-calling": 0.75}, [profile]) == []
    assert [r.code for r in evidence_refusals({"tool-calling": 0.0}, [profile])] == [
        "below-threshold"
    ]


def test_context_window_too_small_or_unknown() -> None:
    specs = [Spec("small", context=32_000), Spec("unknown", context=None), Spec("big")]
    d = plan(specs)
    code, reason, detail = excluded(d)["small"]
    assert code is Code.CONTEXT_WINDOW_TOO_SMALL
    assert reason == "context window too small: 32000 tokens, 100000 required"
    assert detail == {"contextWindowTokens": 32_000, "requiredTokens": 100_000}
    assert code_of(d, "unknown") is Code.CONTEXT_WINDOW_UNKNOWN
    # A request needing more than the profile's context narrows further.
    more = plan([Spec("a", context=128_000), Spec("b")], context_tokens=150_000)
    assert code_of(more, "a") is Code.CONTEXT_WINDOW_TOO_SMALL
    assert more.candidate_ids == ("b",)
    assert more.constraints.context_tokens == 150_000


def test_no_price_is_excluded_only_while_a_budget_applies() -> None:
    specs = [Spec("unpriced", price=None), Spec("priced")]
    budget = plan(specs, budget_applies=True)
    code, reason, detail = excluded(budget)["unpriced"]
    assert code is Code.NO_PRICE_UNDER_BUDGET
    assert reason == (
        f"no price for anthropic/model-unpriced in pricebook {PB} on 2026-05-09 "
        "while a budget applies"
    )
    assert detail["pricingRevision"] == PB
    free = plan(specs)
    assert set(free.candidate_ids) == {"unpriced", "priced"}
    terms = dict(zip(free.candidate_ids, free.terms(), strict=True))
    assert terms["unpriced"].cost == NEUTRAL
    assert terms["priced"].cost == 1.0


def test_price_not_yet_in_effect_counts_as_no_price() -> None:
    later = PriceEntry(
        provider="anthropic",
        model="model-a",
        input_usd_per_mtok=Decimal(1),
        output_usd_per_mtok=Decimal(1),
        effective_from=date(2026, 6, 1),
    )
    d = plan([Spec("a", price=None)], budget_applies=True, snapshot_kw={"extra_prices": [later]})
    assert code_of(d, "a") is Code.NO_PRICE_UNDER_BUDGET
    d = plan(
        [Spec("a", price=None)],
        budget_applies=True,
        now=datetime(2026, 6, 1, tzinfo=UTC),
        snapshot_kw={"extra_prices": [later]},
    )
    assert d.candidate_ids == ("a",)


def test_no_tenant_policy_fails_closed() -> None:
    d = plan([Spec("a"), Spec("b", healthy=False)], snapshot_kw={"policies": []})
    assert d.candidate_ids == ()
    assert not d.routable
    assert code_of(d, "a") is Code.NO_TENANT_POLICY
    assert code_of(d, "b") is Code.UNHEALTHY
    assert d.policy_revision == NO_POLICY_REVISION


def test_request_needs_add_capability_filters() -> None:
    prof = make_profile(["tools", "plain", "json", "failed"], required={})
    specs = [
        Spec("tools", caps={"tool-calling": 0.85}),
        Spec("plain", caps={}),
        Spec("json", caps={"tool-calling": 0.9, "json-schema": 0.9}),
        # Measured, and failed: a tool call is not sent where tool calling failed the suite.
        Spec("failed", caps={"tool-calling": 0.0}, verdicts={"tool-calling": "fail"}),
    ]
    d = plan(specs, profile=prof, needs_tools=True)
    assert d.candidate_ids == ("tools", "json")  # a passing evaluation will do
    assert excluded(d)["plain"][2]["requiredBy"] == "request"
    assert code_of(d, "failed") is Code.CAPABILITY_BELOW_THRESHOLD
    assert d.constraints.tools == "strict"
    d = plan(specs, profile=prof, needs_tools=True, needs_structured_output=True)
    assert d.candidate_ids == ("json",)
    assert d.constraints.structured_output is True
    assert d.constraints.capabilities == {"json-schema": 0.8, "tool-calling": 0.8}
    assert plan(specs, profile=prof).constraints.tools == "none"


def test_first_failing_filter_is_the_one_reported() -> None:
    policy = open_policy(denied_providers=frozenset({"acme"}))
    spec = Spec("a", provider="acme", state=DeploymentState.DEGRADED, caps={})
    d = plan([spec], snapshot_kw={"policies": [policy]})
    assert code_of(d, "a") is Code.UNHEALTHY
    spec.state = DeploymentState.APPROVED
    d = plan([spec], snapshot_kw={"policies": [policy]})
    assert code_of(d, "a") is Code.PROVIDER_DENIED  # policy before the profile's thresholds


# -- scoring ------------------------------------------------------------------------------------


def test_cost_is_a_log_ratio_to_the_cheapest() -> None:
    specs = [
        Spec("x4", price=("4", "8")),
        Spec("x1", price=("1", "2")),
        Spec("x2", price=("2", "4")),
    ]
    d = plan(specs)
    assert d.candidate_ids == ("x1", "x2", "x4")
    costs = [t.cost for t in d.terms()]
    assert costs == pytest.approx([1.0, 0.5, 1 / 3])


def test_latency_history_and_capability_rank() -> None:
    fast_slow = plan([Spec("slow", p95_ms=2000), Spec("fast", p95_ms=1000)])
    assert fast_slow.candidate_ids == ("fast", "slow")
    assert [t.latency for t in fast_slow.terms()] == pytest.approx([1.0, 0.5])
    history = plan([Spec("flaky", successes=50), Spec("solid", successes=100)])
    assert history.candidate_ids == ("solid", "flaky")
    caps = plan(
        [Spec("ok", caps={"tool-calling": 0.85}), Spec("best", caps={"tool-calling": 0.99})]
    )
    assert caps.candidate_ids == ("best", "ok")
    assert [t.capability for t in caps.terms()] == pytest.approx([0.99, 0.85])


def test_capability_term_is_the_mean_over_required_capabilities_only() -> None:
    prof = make_profile(["a"], required={"tool-calling": 0.5, "planning": 0.5})
    caps = {"tool-calling": 0.9, "planning": 0.7, "multi-turn": 0.1}
    d = plan([Spec("a", caps=caps)], profile=prof)
    assert d.terms()[0].capability == pytest.approx(0.8)
    none_required = plan([Spec("a", caps=caps)], profile=make_profile(["a"], required={}))
    assert none_required.terms()[0].capability == NEUTRAL


def test_missing_statistics_score_neutral() -> None:
    d = plan([Spec("a", p95_ms=None, attempts=0, successes=0, price=None)])
    t = d.terms()[0]
    assert (t.latency, t.history, t.cost) == (NEUTRAL, NEUTRAL, NEUTRAL)


def test_score_is_the_weighted_sum_of_its_terms() -> None:
    specs = [Spec("a", price=("3", "9"), p95_ms=800, successes=90), Spec("b", p95_ms=None)]
    w = Weights(capability=0.4, cost=0.3, latency=0.2, history=0.1)
    d = plan(specs, weights=w)
    for score, t in zip(d.scores, d.terms(), strict=True):
        expected = 0.4 * t.capability + 0.3 * t.cost + 0.2 * t.latency + 0.1 * t.history
        assert score == pytest.approx(expected, rel=1e-12)
        assert 0.0 <= score <= 1.0


def test_weights_change_the_ranking() -> None:
    specs = [Spec("cheap", price=("0.1", "0.2"), caps={"tool-calling": 0.81}), Spec("good")]
    only_cost = Weights(capability=0, cost=1, latency=0, history=0)
    only_capability = Weights(capability=1, cost=0, latency=0, history=0)
    assert plan(specs, weights=only_cost).candidate_ids == ("cheap", "good")
    assert plan(specs, weights=only_capability).candidate_ids == ("good", "cheap")


def test_cheap_weak_evidence_never_wins_on_price() -> None:
    specs = [Spec("cheap-weak", price=("0", "0"), caps={"tool-calling": 0.79}), Spec("strong")]
    d = plan(specs, weights=Weights(capability=0, cost=1, latency=0, history=0))
    assert d.candidate_ids == ("strong",)
    assert code_of(d, "cheap-weak") is Code.CAPABILITY_BELOW_THRESHOLD


# -- tie-breaks -------------------------------------------------------------------------------


def test_equal_scores_follow_the_profile_preference_order() -> None:
    specs = [Spec("a", model="m"), Spec("b", model="m"), Spec("c", model="m")]
    assert len(set(plan(specs).scores)) == 1
    assert plan(specs, profile=make_profile(["b", "c", "a"])).candidate_ids == ("b", "c", "a")
    assert plan(specs, profile=make_profile(["c", "a", "b"])).candidate_ids == ("c", "a", "b")


def test_a_deployment_listed_twice_keeps_its_first_position() -> None:
    specs = [Spec("a", model="m"), Spec("b", model="m")]
    d = plan(specs, profile=make_profile(["b", "a", "b"]))
    assert d.candidate_ids == ("b", "a")


# -- weights ----------------------------------------------------------------------------------


def test_default_weights() -> None:
    assert DEFAULT_WEIGHTS.as_tuple() == (0.5, 0.2, 0.2, 0.1)
    assert Weights.from_config({"capability": 0.5, "cost": 0.2, "latency": 0.2, "history": 0.1})


@pytest.mark.parametrize(
    "raw",
    [
        {"capability": 0.5, "cost": 0.5, "latency": 0.5, "history": 0.0},  # sums to 1.5
        {"capability": 1.2, "cost": -0.2, "latency": 0.0, "history": 0.0},  # out of range
        {"capability": math.nan, "cost": 0.5, "latency": 0.5, "history": 0.0},
        {"capability": 0.5, "cost": 0.2, "latency": 0.2, "histroy": 0.1},  # typo
        {"capability": 0, "cost": 0, "latency": 0, "history": 0},
    ],
)
def test_invalid_weights_are_refused(raw: dict[str, float]) -> None:
    with pytest.raises(ValidationError):
        Weights.from_config(raw)


def test_weights_are_immutable() -> None:
    with pytest.raises(ValidationError):
        DEFAULT_WEIGHTS.cost = 0.9  # type: ignore[misc]


# -- decision record ----------------------------------------------------------------------------


def test_decision_id_is_deterministic_and_covers_every_input() -> None:
    specs = [Spec("a"), Spec("b")]
    first = plan(specs)
    assert first.policy_decision_id == plan(specs).policy_decision_id
    assert first.policy_decision_id.version == 5
    variants = [
        plan(specs, now=NOW + timedelta(seconds=1)),
        plan(specs, snapshot_kw={"version": 2}),
        plan(specs, needs_tools=True),
        plan(specs, data_classification=DC.PUBLIC),
        plan(specs, weights=Weights(capability=0.6, cost=0.1, latency=0.2, history=0.1)),
        plan(specs, snapshot_kw={"policies": [open_policy(revision="rev-2")]}),
        plan(specs, profile=make_profile(["a", "b"], max_output=4_000)),
    ]
    ids = {v.policy_decision_id for v in variants} | {first.policy_decision_id}
    assert len(ids) == len(variants) + 1


def test_the_same_instant_in_another_timezone_is_the_same_decision() -> None:
    cet = NOW.astimezone(__import__("zoneinfo").ZoneInfo("Europe/Amsterdam"))
    assert plan([Spec("a")], now=cet).policy_decision_id == plan([Spec("a")]).policy_decision_id


def test_naive_clock_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        plan([Spec("a")], now=datetime(2026, 5, 9))


def test_result_has_the_preview_shape_and_round_trips() -> None:
    specs = [Spec("anthropic/westeurope/claude"), Spec("openai/global", privacy=PC.EXTERNAL)]
    result = plan(specs).to_result()
    body = result.model_dump(mode="json")
    assert body["profileId"] == "code-agent"
    assert body["profileVersion"] == "1"
    assert body["constraints"]["privacyClass"] == "Regional"
    assert body["constraints"]["tools"] == "strict"
    assert body["candidates"][0]["deploymentId"] == "anthropic/westeurope/claude"
    assert body["candidates"][0]["kept"] is True
    assert set(body["candidates"][0]) >= {"deploymentId", "score", "kept"}
    assert set(body["excluded"][0]) == {"deploymentId", "reason", "code", "detail"}
    assert body["snapshotVersion"] == 1
    assert body["policyRevision"] == "rev-1"
    assert body["pricingRevision"] == PB
    assert RoutePlanResult.model_validate(body) == result
    assert result.candidate_ids == ["anthropic/westeurope/claude"]


# -- tenants, profiles and the snapshot -------------------------------------------------------


def test_another_tenants_deployment_is_indistinguishable_from_a_missing_one() -> None:
    prof = make_profile(["theirs", "mine"])
    specs = [Spec("theirs", tenant="tenant-b", state=DeploymentState.DEGRADED), Spec("mine")]
    snap = build(specs, profiles=[prof])
    d = plan_route(snap, prof, PlanRequest(tenant_id=T, data_classification=DC.INTERNAL), now=NOW)
    assert excluded(d)["theirs"][0] is Code.NOT_IN_CATALOG
    assert d.candidate_ids == ("mine",)


def test_shared_catalog_and_a_tenants_own_id_winning() -> None:
    platform_profile = make_profile(["shared", "both"], tenant="platform")
    specs = [
        Spec("shared", tenant="platform"),
        Spec("both", tenant="platform", p95_ms=100),
        Spec("both", tenant=T, region="northeurope"),
    ]
    snap = build(specs, profiles=[platform_profile], shared=frozenset({"platform"}))
    prof = snap.profile(T, "code-agent")
    assert prof is not None
    d = plan_route(snap, prof, PlanRequest(tenant_id=T, data_classification=DC.INTERNAL), now=NOW)
    assert set(d.candidate_ids) == {"shared", "both"}
    chosen = snap.deployment(T, "both")
    assert chosen is not None and chosen.region == "northeurope"


def test_another_tenants_unshared_profile_is_refused() -> None:
    prof = make_profile(["a"], tenant="tenant-b")
    snap = build([Spec("a")], profiles=[prof])
    with pytest.raises(ProfileNotVisible):
        plan_route(snap, prof, PlanRequest(tenant_id=T, data_classification=DC.INTERNAL), now=NOW)


def test_a_draft_profile_outside_the_snapshot_is_planned_and_named_apart() -> None:
    snap = build([Spec("a"), Spec("b")], profiles=[make_profile(["a", "b"])])
    draft = make_profile(["b"])  # same id and version, different content
    req = PlanRequest(tenant_id=T, data_classification=DC.INTERNAL)
    published = plan_route(snap, make_profile(["a", "b"]), req, now=NOW)
    drafted = plan_route(snap, draft, req, now=NOW)
    assert drafted.candidate_ids == ("b",)
    assert drafted.policy_decision_id != published.policy_decision_id


def test_snapshot_rejects_duplicates_and_keeps_the_latest_score_whatever_the_order() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        build([Spec("a"), Spec("a")])
    with pytest.raises(ValueError, match="duplicate deployment"):
        CatalogSnapshot.build(version=1, deployments=[Spec("a").deployment()] * 2)
    old, new = (
        CapabilityScore(
            tenant_id=T,
            deployment_id="a",
            capability="tool-calling",
            verdict=v,
            score=s,
            evaluated_at=at,
            suite_version="s",
        )
        for v, s, at in [("pass", 0.95, NOW - timedelta(days=9)), ("fail", 0.4, NOW)]
    )
    for order in ([old, new], [new, old]):
        snap = CatalogSnapshot.build(
            version=1, deployments=[Spec("a").deployment()], capability_scores=order
        )
        found = snap.capability(T, "a", "tool-calling")
        assert found is not None and found.verdict == "fail"


def test_profile_lookup_picks_the_highest_active_version() -> None:
    profiles = [
        make_profile(["a"], version="2"),
        make_profile(["a"], version="10"),
        make_profile(["a"], version="11").model_copy(update={"status": ProfileStatus.RETIRED}),
    ]
    snap = build([Spec("a")], profiles=profiles)
    found = snap.profile(T, "code-agent")
    assert found is not None and found.version == "10"
    assert snap.profile(T, "code-agent", "11") is not None
    assert snap.profile("tenant-b", "code-agent") is None


def test_catalog_deployment_from_a_record() -> None:
    record = DeploymentRecord(
        deployment_id="a",
        tenant_id=T,
        provider="openai",
        model="gpt",
        region="global",
        privacy_class=PC.EXTERNAL,
        endpoint_ref="env:KEY",
        state=DeploymentState.APPROVED,
        healthy=True,
        version=3,
        context_window_tokens=128_000,
    )
    entry = CatalogDeployment.from_record(record)
    assert (entry.deployment_id, entry.version, entry.context_window_tokens) == ("a", 3, 128_000)


# -- constraints ------------------------------------------------------------------------------


def test_constraints_intersect_profile_and_policy_and_every_candidate_satisfies_them() -> None:
    policy = open_policy(
        allowed_privacy_classes={DC.CONFIDENTIAL: frozenset({PC.CONFIDENTIAL, PC.LOCAL})},
        allowed_regions=frozenset({"westeurope", "eastus"}),
    )
    prof = make_profile(["a", "b"], regions=["westeurope", "northeurope"])
    specs = [Spec("a", privacy=PC.CONFIDENTIAL), Spec("b", privacy=PC.LOCAL)]
    snap = build(specs, profiles=[prof], policies=[policy])
    req = PlanRequest(tenant_id=T, data_classification=DC.CONFIDENTIAL)
    d = plan_route(snap, prof, req, now=NOW)
    c = d.constraints
    assert c.privacy_class is PC.CONFIDENTIAL
    assert c.allowed_privacy_classes == (PC.CONFIDENTIAL, PC.LOCAL)
    assert c.regions == ("westeurope",)
    assert c.capabilities == {"tool-calling": 0.8}
    assert d.candidate_ids == ("a", "b")
    assert all(satisfies_constraints(snap, T, x, c) for x in d.candidate_ids)
    assert not satisfies_constraints(snap, T, "ghost", c)


# -- policy -----------------------------------------------------------------------------------


def test_baseline_policy() -> None:
    compiled = baseline_policy(T).compile()
    assert compiled.privacy_classes_for(DC.INTERNAL) == frozenset(PC)
    assert compiled.privacy_classes_for(DC.CONFIDENTIAL) == {PC.CONFIDENTIAL, PC.LOCAL}
    assert compiled.privacy_classes_for(DC.RESTRICTED) == {PC.LOCAL}


def test_policy_must_allow_something() -> None:
    with pytest.raises(ValidationError):
        TenantPolicy(tenant_id=T, revision="r", allowed_privacy_classes={})


# -- pricing ----------------------------------------------------------------------------------


def _price(on: date, inp: str = "3", out: str = "15", cached: str | None = "0.3") -> PriceEntry:
    return PriceEntry(
        provider="anthropic",
        model="claude",
        input_usd_per_mtok=Decimal(inp),
        output_usd_per_mtok=Decimal(out),
        cached_input_usd_per_mtok=Decimal(cached) if cached else None,
        effective_from=on,
    )


def test_pricebook_picks_the_price_in_effect() -> None:
    book = Pricebook(
        revision="r", entries=(_price(date(2026, 3, 1), inp="2"), _price(date(2026, 1, 1)))
    )
    assert book.price_for("anthropic", "claude", date(2025, 12, 31)) is None
    jan = book.price_for("anthropic", "claude", date(2026, 2, 28))
    assert jan is not None and jan.input_usd_per_mtok == 3
    mar = book.price_for("anthropic", "claude", date(2026, 3, 1))
    assert mar is not None and mar.input_usd_per_mtok == 2
    assert book.price_for("openai", "claude", date(2026, 3, 1)) is None
    with pytest.raises(ValidationError, match="two prices"):
        Pricebook(revision="r", entries=(_price(date(2026, 1, 1)), _price(date(2026, 1, 1))))


def test_cost_estimates_are_exact_decimals() -> None:
    p = _price(date(2026, 1, 1))
    cost = estimate_cost_usd(p, input_tokens=10_000, output_tokens=2_000, cached_input_tokens=4_000)
    # 6,000 x 3 + 4,000 x 0.3 + 2,000 x 15, per million
    assert cost == Decimal("0.0492")
    assert worst_case_cost_usd(p, input_tokens_estimate=10_000, max_output_tokens=2_000) == (
        Decimal("0.06")
    )
    no_cache_price = _price(date(2026, 1, 1), cached=None)
    assert estimate_cost_usd(
        no_cache_price, input_tokens=1_000_000, output_tokens=0, cached_input_tokens=500_000
    ) == Decimal(3)
    with pytest.raises(ValueError, match="cannot exceed"):
        estimate_cost_usd(p, input_tokens=1, output_tokens=0, cached_input_tokens=2)


def test_a_worst_case_rounds_up_and_a_receipt_cost_half_away_from_zero() -> None:
    # 1 token at 0.075 USD per million is 0.000000075: a receipt records 0.00000008 (as
    # PostgreSQL rounds), and 1 token at 0.071 records 0.00000007; a budget's worst case is
    # never below the exact cost, so both reserve 0.00000008.
    for price, recorded in (("0.075", "0.00000008"), ("0.071", "0.00000007")):
        p = _price(date(2026, 1, 1), inp=price)
        assert estimate_cost_usd(p, input_tokens=1, output_tokens=0) == Decimal(recorded)
        worst = worst_case_cost_usd(p, input_tokens_estimate=1, max_output_tokens=0)
        assert worst == Decimal("0.00000008") >= Decimal(price) / 1_000_000


def test_a_cost_past_what_a_receipt_holds_is_unknown() -> None:
    top = _price(date(2026, 1, 1), inp="9999999999.99999999", out="0")
    assert receipt_cost_usd(top, input_tokens=1_000_000, output_tokens=0) == COST_MAX
    assert receipt_cost_usd(top, input_tokens=1_000_001, output_tokens=0) is None
    # The budget's worst case is not bounded by the column: it is compared, never stored.
    assert worst_case_cost_usd(top, input_tokens_estimate=2_000_000, max_output_tokens=0) > COST_MAX


def test_a_price_change_in_the_pricebook_changes_the_plan_on_its_date() -> None:
    specs = [Spec("a", price=("1", "1")), Spec("b", price=("2", "2"))]
    cut = PriceEntry(
        provider="anthropic",
        model="model-b",
        input_usd_per_mtok=Decimal("0.5"),
        output_usd_per_mtok=Decimal("0.5"),
        effective_from=date(2026, 6, 1),
    )
    w = Weights(capability=0, cost=1, latency=0, history=0)
    before = plan(specs, weights=w, snapshot_kw={"extra_prices": [cut]})
    after = plan(
        specs,
        weights=w,
        now=datetime(2026, 6, 1, tzinfo=UTC),
        snapshot_kw={"extra_prices": [cut]},
    )
    assert before.candidate_ids == ("a", "b")
    assert after.candidate_ids == ("b", "a")


def test_each_decision_owns_its_constraints() -> None:
    prof = make_profile(["a"])
    snap = build([Spec("a")], profiles=[prof])
    req = PlanRequest(tenant_id=T, data_classification=DC.INTERNAL)
    first = plan_route(snap, prof, req, now=NOW)
    first.constraints.capabilities["tool-calling"] = 0.0  # a caller scribbling on its copy
    second = plan_route(snap, prof, req, now=NOW)
    assert second.constraints.capabilities == {"tool-calling": 0.8}
    assert "code-agent@1" in repr(second)
