"""Profiles (the list, and one profile with its deployments in preference order, its fallback
chain with why each entry may stand in, its limits and versions) and the route preview: the
same planner call as `POST …/route-plan/preview`, made readable."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import ValidationError

from api.console.render import page
from api.console.session import Changing, ConsoleError, Operator, SignedIn
from api.deps import RuntimeDep
from api.problems import Problem
from api.refusals import unknown_profile
from api.routers import profiles as profile_routes
from api.routers.routing import Needs
from api.runtime import Runtime
from domain.access import Action
from domain.enums import Scope
from domain.fallback_notes import Equivalence, equivalence
from domain.policy import DataClassification
from domain.profiles import ModelProfile
from domain.route_plan import RoutePlanResult
from routing.refusals import UnknownProfile
from store import console_reads
from store.repositories import ModelProfileRepository
from store.tables import ModelProfileRow

router = APIRouter()


def _read(operator: Operator) -> None:
    if not operator.may(Scope.MODELS_READ, Action.READ_CATALOG):
        raise ConsoleError(403, "Profiles need the scope factory.models.read.")


def unreadable_profile(profile_id: str, version: str | None) -> str:
    """What a page says of a profile whose stored row does not read as a profile."""
    named = f"Profile {profile_id!r}" + (f" v{version}" if version else "")
    return (
        f"{named}: its stored record does not read as this version reads it (written before a "
        "rule was tightened, or by hand); correct the row."
    )


def readable(
    rows: Iterable[ModelProfileRow],
) -> tuple[list[ModelProfile], list[ModelProfileRow]]:
    """The rows that read as profiles, and those that do not (written before a rule was
    tightened, or by hand; the lifecycle refuses with StoredRecordUnreadable on them): one
    such row made the profile list and every page naming it a 500, the other rows gone."""
    good: list[ModelProfile] = []
    bad: list[ModelProfileRow] = []
    for row in rows:
        try:
            good.append(ModelProfile.model_validate(row))
        except ValidationError:
            bad.append(row)
    return good, bad


@router.get("/profiles", response_class=HTMLResponse)
async def profile_list(request: Request, operator: SignedIn, runtime: RuntimeDep) -> Response:
    _read(operator)
    async with runtime.sessions() as session:
        rows = await ModelProfileRepository(session, operator.tenant_id).latest_active()
    profiles, unreadable = readable(rows)
    return page(
        request,
        "profiles.html",
        operator,
        title="Profiles",
        nav="profiles",
        profiles=profiles,
        unreadable=[(r.profile_id, r.version) for r in unreadable],
    )


@router.get("/profiles/{profile_id}", response_class=HTMLResponse)
async def profile_page(
    request: Request,
    profile_id: str,
    operator: SignedIn,
    runtime: RuntimeDep,
    # A version of the profile (a deployment page's column, a row of the versions table), as
    # the REST read takes it: the page showed the newest whatever version was clicked.
    version: Annotated[str | None, Query(max_length=50)] = None,
) -> Response:
    _read(operator)
    async with runtime.sessions() as session:
        try:
            # The REST read itself: the same rows, the same allowed-deployment summary.
            detail = await profile_routes.get_profile(
                profile_id, operator.principal, session, runtime, version or None
            )
        except Problem as problem:
            raise ConsoleError(problem.status, problem.detail) from None
        except ValidationError:
            raise ConsoleError(409, unreadable_profile(profile_id, version)) from None
        good, bad = readable(
            await ModelProfileRepository(session, operator.tenant_id).latest_active()
        )
        active = {p.profile_id: p for p in good}
        unreadable = {r.profile_id: r.version for r in bad}
        versions = await console_reads.profile_versions(session, operator.tenant_id, profile_id)
    profile = ModelProfile.model_validate(detail.model_dump())
    chain = [
        (
            fallback_id,
            # Said as what it is: "not an active profile" it is not.
            Equivalence(False, [unreadable_profile(fallback_id, unreadable[fallback_id])])
            if fallback_id in unreadable
            else equivalence(profile, active.get(fallback_id)),
        )
        for fallback_id in profile.fallback_chain
    ]
    return page(
        request,
        "profile.html",
        operator,
        title=f"Profile {profile_id} v{detail.version}" if version else f"Profile {profile_id}",
        nav="profiles",
        profile=detail,
        chain=chain,
        versions=versions,
    )


@router.get("/preview", response_class=HTMLResponse)
async def preview_form(request: Request, operator: SignedIn, runtime: RuntimeDep) -> Response:
    _read(operator)
    return await _preview_page(request, operator, runtime, None, {})


@router.post("/preview", response_class=HTMLResponse)
async def preview(
    request: Request,
    operator: Changing,
    runtime: RuntimeDep,
    # Empty when the tenant has no active profile: the form's list has nothing to send.
    profile_id: Annotated[str, Form(max_length=200)] = "",
    data_classification: Annotated[str, Form(max_length=40)] = "Internal",
    needs_tools: Annotated[bool, Form()] = False,
    needs_structured_output: Annotated[bool, Form()] = False,
    budget_applies: Annotated[bool, Form()] = False,
    context_tokens: Annotated[str, Form(max_length=20)] = "",
) -> Response:
    # A preview changes nothing, but it is a POST like the API's: it carries the token too.
    _read(operator)
    form = {
        "profile_id": profile_id,
        "data_classification": data_classification,
        "needs_tools": needs_tools,
        "needs_structured_output": needs_structured_output,
        "budget_applies": budget_applies,
        "context_tokens": context_tokens,
    }
    if not profile_id:
        return await _preview_page(
            request,
            operator,
            runtime,
            None,
            form,
            error="profile: no active profile to preview; publish one first",
            status=422,
        )
    try:
        needs = Needs.model_validate(
            {
                "dataClassification": data_classification,
                "needsTools": needs_tools,
                "needsStructuredOutput": needs_structured_output,
                "budgetApplies": budget_applies,
                "contextTokens": int(context_tokens) if context_tokens.strip() else None,
            }
        )
    except (ValidationError, ValueError) as exc:
        return await _preview_page(
            request, operator, runtime, None, form, error=_first_error(exc), status=422
        )
    try:
        result = await runtime.routes.decide(needs.plan_request(operator.tenant_id), profile_id)
    except UnknownProfile as unknown:
        problem = unknown_profile(unknown)
        return await _preview_page(
            request, operator, runtime, None, form, error=problem.detail, status=problem.status
        )
    return await _preview_page(request, operator, runtime, result, form)


def _first_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err.get("loc", ()))
        return f"{field}: {err.get('msg', 'invalid')}"
    return "contextTokens: must be a whole number"


async def _preview_page(
    request: Request,
    operator: Operator,
    runtime: Runtime,
    result: RoutePlanResult | None,
    form: dict[str, Any],
    error: str | None = None,
    status: int = 200,
) -> Response:
    async with runtime.sessions() as session:
        rows = await ModelProfileRepository(session, operator.tenant_id).latest_active()
    return page(
        request,
        "preview.html",
        operator,
        title="Route preview",
        nav="preview",
        status=status,
        profile_ids=[r.profile_id for r in rows],
        classifications=[c.value for c in DataClassification],
        form=form,
        result=result,
        error=error,
    )
