"""The HTTP answer to each routing refusal (routing.refusals): its problem+json body. What a
refusal means (a denial, a transient failure) is decided below the API; this only says it."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from api.problems import UNREADABLE_TYPE, Problem, problem_response
from routing.refusals import (
    NoneAvailable,
    PolicyDenied,
    ProfileUnreadable,
    Refusal,
    RunPlannedForOtherData,
    RunPlannedWithoutNeed,
    RunPlanRetired,
    UnknownProfile,
    WrongModality,
)


def problem_of(
    refused: Refusal,
    retry_after: Callable[[list[str]], int],
    profile_field: str = "profileId",
) -> Problem:
    """`retry_after` says how long a caller told none is available waits for the deployments
    it waits on; `profile_field` is where the surface takes the profile id (named by a
    modality mismatch)."""
    if isinstance(refused, UnknownProfile):
        return unknown_profile(refused, profile_field)
    if isinstance(refused, WrongModality):
        return _wrong_modality(refused, profile_field)
    if isinstance(refused, PolicyDenied):
        return _policy_denied(refused)
    if isinstance(refused, RunPlannedForOtherData):
        return Problem(
            403,
            f"Denied by tenant policy: run {refused.run_id} was planned for {refused.planned} "
            f"data, and none of its deployments may take {refused.call} data. Send this call "
            "on a run of its own.",
            type_="https://model-router.dev/problems/policy-denied",
            field="dataClassification",
            reason=refused.reason,
            errorClass="permanent",
        )
    if isinstance(refused, RunPlanRetired):
        return Problem(
            409,
            f"Every deployment of run {refused.run_id}'s route plan is retired "
            f"({', '.join(refused.retired)}): a run's plan never changes, so this run can take "
            "no further call. Send it on a new run.",
            reason=refused.reason,
            errorClass="permanent",
        )
    if isinstance(refused, RunPlannedWithoutNeed):
        return Problem(
            422,
            f"Run {refused.run_id} was planned without {refused.capability} (its first call "
            f"did not ask for it), and none of its deployments was measured for it. Send this "
            "call on a run of its own.",
            field="tools" if refused.capability == "tool-calling" else "response_format",
            reason=refused.reason,
            errorClass="permanent",
        )
    if isinstance(refused, NoneAvailable):
        return Problem(
            503,
            f"No candidate of profile {refused.profile_id!r} is available "
            "(none approved and healthy under this plan).",
            headers={"Retry-After": str(retry_after(refused.waiting_on))},
            errorClass="transient",
            reason=refused.reason,
            excluded=[{"deploymentId": d, "code": code} for d, code in refused.excluded],
        )
    raise TypeError(f"no problem for {type(refused).__name__}")


def unknown_profile(refused: UnknownProfile, field: str = "profileId") -> Problem:
    """Naming the field the surface took the profile id from (`body.model` on the SDKs'
    surfaces, where their clients look for `param: model`)."""
    if isinstance(refused, ProfileUnreadable):
        return Problem(
            409,
            f"Profile {refused.profile_id!r} has a stored version that does not read as this "
            "version reads it (written before a rule was tightened, or by hand): it routes "
            "nothing until the row is corrected.",
            field=field,
            type_=UNREADABLE_TYPE,
        )
    return Problem(404, f"No active profile {refused.profile_id!r}.", field=field)


def _policy_denied(denied: PolicyDenied) -> Problem:
    plan, refused = denied.plan, denied.refused
    dc = plan.constraints.data_classification.value
    why = "; ".join(f"{e.deployment_id}: {e.reason}" for e in refused)
    return Problem(
        403,
        f"Denied by tenant policy (revision {plan.policy_revision}): no deployment of profile "
        f"{plan.profile_id!r} may take {dc} data ({why}).",
        type_="https://model-router.dev/problems/policy-denied",
        field="dataClassification" if denied.about_data else "profileId",
        reason=denied.reason,
        errorClass="permanent",
        policyRevision=plan.policy_revision,
        policyDecisionId=str(plan.policy_decision_id),
        excluded=[
            {"deploymentId": e.deployment_id, "code": e.code.value, "reason": e.reason}
            for e in plan.excluded
        ],
    )


def _wrong_modality(refused: WrongModality, field: str) -> Problem:
    """A call on a profile of another modality is the caller's mistake, naming the field that
    carries the profile id."""
    profile_id, kind, needed = refused.profile_id, refused.modality.value, refused.needed.value
    message = f"profile {profile_id!r} is a {kind} profile; this endpoint needs a {needed} profile"
    return Problem(
        400,
        f"The {field.removeprefix('body.')} {profile_id!r} names a "
        f"{kind} profile; this operation needs a {needed} profile.",
        type_="https://model-router.dev/problems/modality-mismatch",
        field=field,
        modality=kind,
        requiredModality=needed,
        errors=[{"field": field, "message": message}],
        # The OpenAI SDK reads its error envelope: the same words, under `error`.
        error={
            "message": message,
            "type": "invalid_request_error",
            "param": field.removeprefix("body."),
            "code": "modality_mismatch",
        },
    )


async def _on_unknown_profile(request: Request, exc: Exception) -> JSONResponse:
    # A catalog read outside Invoke and ResolveRoutePlan (the preview, token counting) that
    # names a profile the tenant does not have.
    assert isinstance(exc, UnknownProfile)
    p = unknown_profile(exc)
    return problem_response(
        request, p.status, p.detail, type_=p.type, title=p.title, headers=p.headers, **p.extensions
    )


def install(app: FastAPI) -> None:
    app.add_exception_handler(UnknownProfile, _on_unknown_profile)
