"""Model profiles: the catalog callers choose from."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from api.deps import SessionDep, require
from api.problems import Problem
from core.security import Principal
from domain.access import Action
from domain.enums import Scope
from domain.profiles import ModelProfile
from store.repositories import ModelProfileRepository

router = APIRouter(prefix="/factory/model-profiles", tags=["profiles"])

Reader = Annotated[Principal, Depends(require(Scope.MODELS_READ, Action.READ_CATALOG))]


@router.get("", response_model=list[ModelProfile], operation_id="ListModelProfiles")
async def list_profiles(principal: Reader, session: SessionDep) -> list[ModelProfile]:
    rows = await ModelProfileRepository(session, principal.tenant_id).list_active()
    return [ModelProfile.model_validate(r) for r in rows]


@router.get("/{profileId}", response_model=ModelProfile, operation_id="GetModelProfile")
async def get_profile(profileId: str, principal: Reader, session: SessionDep) -> ModelProfile:
    rows = await ModelProfileRepository(session, principal.tenant_id).list_active()
    matching = [r for r in rows if r.profile_id == profileId]
    if not matching:
        raise Problem(404, f"No active profile {profileId!r}.", field="profileId")
    return ModelProfile.model_validate(matching[-1])
