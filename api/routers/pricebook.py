"""Pricing revisions: published by admins, read by anyone who reads the catalog."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Response
from pydantic import BaseModel

from api.deps import SessionDep, require
from api.problems import Problem
from core.security import Principal
from domain.access import Action
from domain.enums import Scope
from domain.pricing import Pricebook
from store import pricebook

router = APIRouter(prefix="/factory/pricebook-revisions", tags=["pricebook"])

Reader = Annotated[Principal, Depends(require(Scope.MODELS_READ, Action.READ_CATALOG))]
Admin = Annotated[Principal, Depends(require(Scope.MODELS_ADMIN, Action.MANAGE_DEPLOYMENTS))]


class RevisionSummary(BaseModel):
    revision: str
    entries: int


@router.post("", status_code=201, response_model=Pricebook, operation_id="PublishPricebook")
async def publish_revision(
    body: Pricebook, principal: Admin, session: SessionDep, response: Response
) -> Pricebook:
    if not body.entries:
        raise Problem(422, "A pricing revision needs at least one price.", field="body.entries")
    # No retry on an IntegrityError: publish locks the catalog version row before its check,
    # so a second publish of the revision (a client's retry racing its first send) waits and
    # then finds it, a replay (200) or a conflict (409); its rows break no key otherwise (a
    # revision holds one price per model and day).
    try:
        async with session.begin():
            created = await pricebook.publish(session, principal.tenant_id, body)
    except pricebook.RevisionConflict as exc:
        raise Problem(409, f"{exc}; revisions are immutable.", field="body.revision") from None
    response.status_code = 201 if created else 200
    return body


@router.get("", response_model=list[RevisionSummary], operation_id="ListPricebookRevisions")
async def list_revisions(principal: Reader, session: SessionDep) -> list[RevisionSummary]:
    counts = await pricebook.revisions(session, principal.tenant_id)
    return [RevisionSummary(revision=r, entries=n) for r, n in counts.items()]


# A path parameter: a revision named with a `/` (which publishing takes) is read as well.
@router.get("/{revision:path}", response_model=Pricebook, operation_id="GetPricebookRevision")
async def get_revision(revision: str, principal: Reader, session: SessionDep) -> Pricebook:
    book = await pricebook.load(session, principal.tenant_id, revision)
    if book is None:
        raise Problem(404, f"No pricing revision {revision!r}.", field="revision")
    return book
