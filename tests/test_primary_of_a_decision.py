"""Whom a call's receipt names as the plan's first candidate while a deployment is Degraded
(routing.snapshots.CatalogView.primary): the deployment passed over for health that a decision
would have put first, never a well one the decision merely ordered otherwise. Pure: a catalog
snapshot built in memory, no fixtures."""

from __future__ import annotations

from domain.enums import DeploymentState
from domain.planner import PlanRequest
from domain.policy import DataClassification
from domain.scoring import DEFAULT_WEIGHTS
from routing.snapshots import CatalogView
from tests.test_planner import Spec, T, build, make_profile, open_policy


def _view(*specs: Spec) -> tuple[CatalogView, PlanRequest]:
    profile = make_profile([s.id for s in specs])
    snapshot = build(list(specs), profiles=[profile], policies=[open_policy()])
    request = PlanRequest(tenant_id=T, data_classification=DataClassification.INTERNAL)
    return CatalogView(tenant_id=T, snapshot=snapshot, weights=DEFAULT_WEIGHTS), request


def test_a_degraded_deployment_first_when_well_is_the_primary() -> None:
    view, request = _view(
        Spec("a", price=("0.1", "0.1"), state=DeploymentState.DEGRADED),
        Spec("b", price=("4", "4")),
    )
    profile = view.current_profile("code-agent")
    plan = view.decide(profile, request)
    assert plan.candidate_ids == ["b"]
    assert view.primary(plan, profile, request) == "a"  # b answering is a fallback from a


def test_a_well_deployment_ordered_otherwise_is_not_the_primary() -> None:
    # a is the cheapest and least capable: Degraded, it leaves the survivors' best price, and
    # prices score relative to that best, so b, not c, comes first now though c did with a well.
    view, request = _view(
        Spec(
            "a",
            price=("0.1", "0.1"),
            caps={"tool-calling": 0.8},
            p95_ms=5000.0,
            state=DeploymentState.DEGRADED,
        ),
        Spec("b", price=("4", "4"), caps={"tool-calling": 0.85}),
        Spec("c", price=("30", "30"), caps={"tool-calling": 1.0}),
    )
    profile = view.current_profile("code-agent")
    plan = view.decide(profile, request)
    assert plan.candidate_ids == ["b", "c"]
    assert view.well_candidates(profile, request)[0] == "c"
    # c is called now too, after b: b answering replaced nobody.
    assert view.primary(plan, profile, request) == "b"
