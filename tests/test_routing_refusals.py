"""What an empty route means follows from the exclusion codes themselves: every code declares
its meaning in domain.exclusions (a code without one cannot even be imported), the routing
package turns an empty plan into its typed refusal by those meanings, and the API maps each
refusal to one problem. Pure: no fixtures needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from api.refusals import problem_of
from domain.enums import DeploymentState, Modality
from domain.enums import PrivacyClass as PC
from domain.exclusions import MEANINGS, ExclusionCode, Meaning
from domain.policy import DataClassification as DC
from domain.route_plan import Exclusion, RoutePlanResult
from routing.refusals import (
    NoneAvailable,
    PolicyDenied,
    UnknownProfile,
    WrongModality,
    policy_denial,
)
from tests.test_planner import Spec, make_profile, open_policy, plan

ROOT = Path(__file__).resolve().parent.parent


def test_every_exclusion_code_declares_its_meaning() -> None:
    assert set(MEANINGS) == set(ExclusionCode)
    assert all(isinstance(code.meaning, Meaning) for code in ExclusionCode)


def test_a_code_added_without_a_meaning_fails_on_import() -> None:
    # The module as it would be with one more code and nobody deciding what it means.
    source = (ROOT / "domain" / "exclusions.py").read_text()
    marker = "class ExclusionCode(StrEnum):\n"
    assert marker in source
    edited = source.replace(marker, marker + '    SOMETHING_NEW = "something_new"\n')
    with pytest.raises(TypeError, match="something_new"):
        exec(compile(edited, "exclusions.py", "exec"), {"__name__": "edited_exclusions"})


def _empty_plan(*codes: ExclusionCode) -> RoutePlanResult:
    """A real decision with no candidate, its exclusions replaced by `codes` in order."""
    decided = plan([Spec("a", state=DeploymentState.CANDIDATE)]).to_result()
    assert not decided.candidates
    excluded = tuple(
        Exclusion(deployment_id=f"d{i}", code=code, reason=code.value, detail={})
        for i, code in enumerate(codes)
    )
    return decided.model_copy(update={"excluded": excluded})


@pytest.mark.parametrize("code", list(ExclusionCode))
def test_an_empty_plan_is_refused_by_the_meaning_of_its_code(code: ExclusionCode) -> None:
    denied = policy_denial(_empty_plan(code))
    if code.meaning.denies:
        assert isinstance(denied, PolicyDenied)
        assert denied.reason == code.value
        assert denied.about_data is (code.meaning is Meaning.DENIED_FOR_DATA)
    else:
        assert denied is None  # the transient "none available"
    # Something that clears by itself also keeping a candidate out: never a denial.
    assert policy_denial(_empty_plan(code, ExclusionCode.UNHEALTHY)) is None


def test_the_first_policy_refusal_names_the_reason_and_the_field() -> None:
    empty = _empty_plan(
        ExclusionCode.NOT_APPROVED,
        ExclusionCode.CONFIDENTIAL_TO_EXTERNAL,
        ExclusionCode.PROVIDER_DENIED,
    )
    denied = policy_denial(empty)
    assert isinstance(denied, PolicyDenied)
    problem = problem_of(denied, lambda ids: 99)
    assert problem.status == 403
    assert problem.extensions["reason"] == "confidential_to_external_denied"
    assert problem.extensions["field"] == "dataClassification"
    assert problem.extensions["errorClass"] == "permanent"
    assert [e["code"] for e in problem.extensions["excluded"]] == [
        "not_approved",
        "confidential_to_external_denied",
        "provider_denied",
    ]


def test_planner_decisions_are_refused_by_policy_or_found_unavailable() -> None:
    # Restricted data and a policy that keeps it from external providers: a real decision.
    strict = open_policy(external_may_see_confidential=False)
    decided = plan(
        [Spec("ext", privacy=PC.EXTERNAL)],
        profile=make_profile(["ext"], privacy=PC.EXTERNAL),
        snapshot_kw={"policies": [strict]},
        data_classification=DC.RESTRICTED,
    ).to_result()
    denied = policy_denial(decided)
    assert isinstance(denied, PolicyDenied)
    assert (denied.reason, denied.about_data) == ("confidential_to_external_denied", True)
    # The same deployment Degraded as well: health is the first filter, so the plan says
    # unhealthy and is no denial by itself; the routing service reads the refusal from the
    # decision as if it were well (CatalogView.to_refuse, tests/test_routing_service.py).
    degraded = plan(
        [Spec("ext", privacy=PC.EXTERNAL, state=DeploymentState.DEGRADED)],
        profile=make_profile(["ext"], privacy=PC.EXTERNAL),
        snapshot_kw={"policies": [strict]},
        data_classification=DC.RESTRICTED,
    ).to_result()
    assert policy_denial(degraded) is None


def test_each_refusal_has_its_problem() -> None:
    waited: list[list[str]] = []

    def retry_after(ids: list[str]) -> int:
        waited.append(ids)
        return 7

    none = problem_of(NoneAvailable("p", ["d1", "d2"], [("d1", "unhealthy")]), retry_after)
    assert (none.status, none.headers["Retry-After"]) == (503, "7")
    assert none.extensions["errorClass"] == "transient"
    assert none.extensions["reason"] == "unhealthy"
    assert none.extensions["excluded"] == [{"deploymentId": "d1", "code": "unhealthy"}]
    # The reason is what the call waits on, not a mistyped id listed before it.
    both = NoneAvailable("p", ["b"], [("ghost", "not_in_catalog"), ("b", "unhealthy")])
    assert both.reason == "unhealthy"
    assert NoneAvailable("p", [], [("ghost", "not_in_catalog")]).reason == "not_in_catalog"
    assert waited == [["d1", "d2"]]
    unknown = problem_of(UnknownProfile("p"), retry_after)
    assert (unknown.status, unknown.extensions["field"]) == (404, "profileId")
    wrong = problem_of(WrongModality("p", Modality.EMBEDDING, Modality.CHAT), retry_after, "body.x")
    assert (wrong.status, wrong.extensions["field"]) == (400, "body.x")
    assert wrong.extensions["error"]["code"] == "modality_mismatch"
