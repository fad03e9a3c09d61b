"""Receipts of a run: which deployment answered, the usage and how certain it is."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request, Response

from api.deps import SessionDep, require
from api.problems import field_refused
from api.receipt_views import Receipt
from core.security import Principal
from domain.access import Action
from domain.enums import Scope
from store.repositories import InvocationReceiptRepository

router = APIRouter(tags=["receipts"])

RunReader = Annotated[Principal, Depends(require(Scope.RUNS_READ, Action.READ_RUNS))]

# A run's receipts in pages: an agent run of many thousands of calls was one answer, read,
# built and sent whole.
PAGE_MAX = 1000


@router.get(
    "/factory/runs/{runId}/model-receipts",
    response_model=list[Receipt],
    operation_id="ListRunReceipts",
)
async def run_receipts(
    runId: uuid.UUID,
    principal: RunReader,
    session: SessionDep,
    request: Request,
    response: Response,
    limit: Annotated[int, Query(ge=1, le=PAGE_MAX, description="Receipts in a page")] = PAGE_MAX,
    after: Annotated[
        uuid.UUID | None,
        Query(
            description="The last receipt (invocationId) of the page before; the next page's "
            'address is the `Link: rel="next"` header'
        ),
    ] = None,
) -> list[Receipt]:
    receipts = InvocationReceiptRepository(session, principal.tenant_id)
    last = None
    if after is not None:
        last = await receipts.get(after)
        if last is None or last.run_id != runId:
            raise field_refused(
                "query.after",
                "no receipt of this run",
                f"after: {after} is no receipt of run {runId}.",
            )
    rows = list(await receipts.list_for_run(runId, after=last, limit=limit + 1))
    if len(rows) > limit:
        rows = rows[:limit]
        # Relative: behind a proxy, the address this process was asked at is not the caller's.
        following = request.url.include_query_params(after=str(rows[-1].invocation_id))
        response.headers["Link"] = f'<{following.path}?{following.query}>; rel="next"'
    return [Receipt.model_validate(r) for r in rows]
