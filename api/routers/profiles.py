"""Model profiles: the catalog callers choose from, and the asset events that feed it."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Body, Depends, Query, Response
from pydantic import ValidationError
from sqlalchemy.exc import IntegrityError

from api.deps import RuntimeDep, SessionDep, require
from api.problems import UNREADABLE_TYPE, Problem
from api.schemas import AllowedDeployment, ExclusionView, ProfileDetail
from api.views import evidence_summary
from core.security import Principal
from domain.access import Action
from domain.catalog import below_thresholds
from domain.enums import Scope
from domain.exclusions import describe
from domain.profile_releases import AssetEvent, AssetReleasePublished
from domain.profiles import ModelProfile
from store import profile_catalog
from store.evidence import capability_score, current_scores
from store.repositories import ModelDeploymentRepository, ModelProfileRepository
from store.tables import ModelProfileRow

log = logging.getLogger("model_router.api")

router = APIRouter(tags=["profiles"])

Reader = Annotated[Principal, Depends(require(Scope.MODELS_READ, Action.READ_CATALOG))]
Admin = Annotated[Principal, Depends(require(Scope.MODELS_ADMIN, Action.MANAGE_DEPLOYMENTS))]
_TYPE = "https://model-router.dev/problems/"


def _profile(row: ModelProfileRow) -> ModelProfile | None:
    """The stored row as a profile, or None when it does not read as one (thresholds or a
    field written before a rule was tightened, or by hand): such a row was a 500."""
    try:
        return ModelProfile.model_validate(row)
    except ValidationError:
        return None


@router.get(
    "/factory/model-profiles", response_model=list[ModelProfile], operation_id="ListModelProfiles"
)
async def list_profiles(principal: Reader, session: SessionDep) -> list[ModelProfile]:
    """A row that does not read is left out and logged by id, not marked: an entry is a
    whole profile (the spec's fields), and one row made the whole catalog a 500. Its own GET
    answers the 409 that says what to correct."""
    profiles: list[ModelProfile] = []
    for row in await ModelProfileRepository(session, principal.tenant_id).latest_active():
        profile = _profile(row)
        if profile is None:
            log.warning(
                "profile left out of the list: its stored record does not read",
                extra={"profile": f"{row.profile_id} v{row.version}"},
            )
        else:
            profiles.append(profile)
    return profiles


@router.get(
    "/factory/model-profiles/{profileId}",
    response_model=ProfileDetail,
    operation_id="GetModelProfile",
)
async def get_profile(
    profileId: str,
    principal: Reader,
    session: SessionDep,
    runtime: RuntimeDep,
    version: Annotated[
        str | None, Query(max_length=50, description="A specific (possibly retired) version")
    ] = None,
) -> ProfileDetail:
    # The catalog as routing holds it, for the planner's request-independent filters below:
    # read before this session's first query, so that a snapshot built now (on a connection of
    # the same pool) never waits on one this request already holds.
    view = await runtime.snapshots.view(principal.tenant_id)
    profiles = ModelProfileRepository(session, principal.tenant_id)
    if version is not None:
        row = await profiles.get_version(profileId, version)
    else:
        row = next((r for r in await profiles.latest_active() if r.profile_id == profileId), None)
    if row is None:
        raise Problem(404, f"No active profile {profileId!r}.", field="profileId")
    profile = _profile(row)
    if profile is None:
        # What is wrong and what to do, never the stored values (a hand-written row may hold
        # anything). The console's profile page shows this same refusal.
        raise Problem(
            409,
            f"Profile {profileId!r} v{row.version}'s stored record does not read as this version "
            "reads it (written before a rule was tightened, or by hand): correct the row, then "
            "ask again.",
            field="profileId",
            type_=UNREADABLE_TYPE,
        )
    deployments = ModelDeploymentRepository(session, principal.tenant_id)
    found = {d.deployment_id: d for d in await deployments.list()}
    listed = [found[i] for i in row.allowed_deployments if i in found]
    scores = await current_scores(session, principal.tenant_id, listed)
    kept_out = view.snapshot.cohort(principal.tenant_id, profile).standing()
    allowed = []
    for deployment_id in row.allowed_deployments:
        d = found.get(deployment_id)
        if d is None:
            allowed.append(AllowedDeployment(deployment_id=deployment_id, registered=False))
            continue
        rows = scores.get(deployment_id, [])
        below = below_thresholds(profile, [capability_score(principal.tenant_id, r) for r in rows])
        # Approved and healthy alone said "routable" of a deployment the planner leaves out of
        # every plan of this profile (re-evaluated below its thresholds, no context window).
        out = kept_out.get(deployment_id)
        allowed.append(
            AllowedDeployment(
                deployment_id=deployment_id,
                registered=True,
                state=d.state.value,
                healthy=d.healthy,
                routable=out is None,
                exclusion=None
                if out is None
                else ExclusionView(code=out[0].value, reason=describe(*out)),
                below_thresholds=below,
                evidence=evidence_summary(d.capability_evidence_ref, rows),
            )
        )
    return ProfileDetail(**profile.model_dump(), deployments=allowed)


@router.post(
    "/factory/asset-events",
    response_model=ModelProfile,
    operation_id="AcceptAssetEvent",
    summary="Accept an AssetReleasePublished / Deprecated / Revoked event for a profile",
)
async def accept_asset_event(
    event: Annotated[AssetEvent, Body()], principal: Admin, session: SessionDep, response: Response
) -> ModelProfile:
    """The same event again changes nothing and says so (`Idempotent-Replay: true`); other
    content under an existing version is a 409 listing each differing field."""
    try:
        outcome = await _accept(session, principal.tenant_id, event)
    except IntegrityError:
        # A concurrent activation of the same version won: this event is then its replay, or
        # other content under that version (409), as it would have been had it come second.
        try:
            outcome = await _accept(session, principal.tenant_id, event)
        except IntegrityError:
            raise Problem(409, "This profile version was activated concurrently.") from None
    if not outcome.changed:
        response.headers["Idempotent-Replay"] = "true"
    return outcome.profile


async def _accept(
    session: SessionDep, tenant_id: str, event: AssetEvent
) -> profile_catalog.Outcome:
    try:
        async with session.begin():
            if isinstance(event, AssetReleasePublished):
                return await profile_catalog.activate(session, tenant_id, event)
            retired = await profile_catalog.retire(session, tenant_id, event)
            if retired is None:
                raise Problem(
                    404,
                    f"No profile {event.profile_id!r} version {event.version!r}.",
                    field="profileId",
                )
            return retired
    except profile_catalog.ActivationRefused as exc:
        raise Problem(
            422,
            "Profile activation refused: " + "; ".join(exc.refusals) + ".",
            type_=_TYPE + "profile-activation-refused",
            refusals=exc.refusals,
        ) from None
    except profile_catalog.VersionConflict as exc:
        raise Problem(
            409,
            f"{exc}.",
            field="profile.version",
            type_=_TYPE + "profile-version-exists",
            differences=[d.model_dump(mode="json") for d in exc.differences],
        ) from None
