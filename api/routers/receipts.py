"""Receipts of a run: which deployment answered, the usage and how certain it is."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Depends

from api.deps import SessionDep, require
from api.receipt_views import Receipt
from core.security import Principal
from domain.access import Action
from domain.enums import Scope
from store.repositories import InvocationReceiptRepository

router = APIRouter(tags=["receipts"])

RunReader = Annotated[Principal, Depends(require(Scope.RUNS_READ, Action.READ_RUNS))]


@router.get(
    "/factory/runs/{runId}/model-receipts",
    response_model=list[Receipt],
    operation_id="ListRunReceipts",
)
async def run_receipts(
    runId: uuid.UUID, principal: RunReader, session: SessionDep
) -> list[Receipt]:
    rows = await InvocationReceiptRepository(session, principal.tenant_id).list_for_run(runId)
    return [Receipt.model_validate(r) for r in rows]
