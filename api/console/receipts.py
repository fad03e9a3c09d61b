"""Receipts: the recent ones (or one run's), filterable by outcome, usage status, deployment and
profile, and one receipt with every field. Receipts hold no content, only hashes and artifact
references, and so does every page here."""

from __future__ import annotations

import uuid
from typing import Annotated, TypeVar

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response

from api.console.render import page
from api.console.session import ConsoleError, Operator, SignedIn
from api.deps import RuntimeDep
from api.routers.receipts import Receipt
from domain.access import Action
from domain.enums import InvocationOutcome, Scope, UsageStatus
from store import console_reads

router = APIRouter()


def _read(operator: Operator) -> None:
    if not operator.may(Scope.RUNS_READ, Action.READ_RUNS):
        raise ConsoleError(403, "Receipts need the scope factory.runs.read.")


E = TypeVar("E", InvocationOutcome, UsageStatus)


def _enum(kind: type[E], value: str | None) -> E | None:
    if not value:
        return None
    try:
        return kind(value)
    except ValueError:
        raise ConsoleError(400, f"Unknown {kind.__name__} {value!r}.") from None


@router.get("/receipts", response_class=HTMLResponse)
async def receipt_list(
    request: Request,
    operator: SignedIn,
    runtime: RuntimeDep,
    outcome: Annotated[str | None, Query(max_length=20)] = None,
    usage_status: Annotated[str | None, Query(max_length=20)] = None,
    deployment_id: Annotated[str | None, Query(max_length=200)] = None,
    profile_id: Annotated[str | None, Query(max_length=200)] = None,
    run_id: Annotated[str | None, Query(max_length=40)] = None,
) -> Response:
    _read(operator)
    try:
        run = uuid.UUID(run_id) if run_id else None
    except ValueError:
        raise ConsoleError(400, "runId must be a UUID.") from None
    where = console_reads.ReceiptFilter(
        outcome=_enum(InvocationOutcome, outcome),
        usage_status=_enum(UsageStatus, usage_status),
        deployment_id=deployment_id or None,
        profile_id=profile_id or None,
        run_id=run,
    )
    async with runtime.sessions() as session:
        rows = await console_reads.receipts(session, operator.tenant_id, where)
        deployments, profiles = await console_reads.distinct_values(session, operator.tenant_id)
    # The filter lists show the catalog only to whom the API lists it (a Requester reads runs
    # and profiles, not deployments): the lists named every deployment of the tenant, Candidates
    # in no profile included. Without them the filter in force stays selectable.
    if not operator.may(Scope.MODELS_ADMIN, Action.READ_DEPLOYMENTS):
        deployments = [deployment_id] if deployment_id else []
    if not operator.may(Scope.MODELS_READ, Action.READ_CATALOG):
        profiles = [profile_id] if profile_id else []
    return page(
        request,
        "receipts.html",
        operator,
        title=f"Receipts of run {run}" if run else "Receipts",
        nav="receipts",
        receipts=[Receipt.model_validate(r) for r in rows],
        outcomes=[o.value for o in InvocationOutcome],
        statuses=[s.value for s in UsageStatus],
        deployments=deployments,
        profiles=profiles,
        filters={
            "outcome": outcome or "",
            "usage_status": usage_status or "",
            "deployment_id": deployment_id or "",
            "profile_id": profile_id or "",
            "run_id": run_id or "",
        },
        limit=where.limit,
    )


@router.get("/receipts/{invocation_id}", response_class=HTMLResponse)
async def receipt_page(
    request: Request, invocation_id: str, operator: SignedIn, runtime: RuntimeDep
) -> Response:
    _read(operator)
    try:
        iid = uuid.UUID(invocation_id)
    except ValueError:
        raise ConsoleError(404, f"No receipt {invocation_id!r}.") from None
    async with runtime.sessions() as session:
        row = await console_reads.receipt(session, operator.tenant_id, iid)
        if row is None:
            raise ConsoleError(404, f"No receipt {invocation_id!r}.")
        settled = await console_reads.reconciliations(session, operator.tenant_id, iid)
    receipt = Receipt.model_validate(row)
    fields = receipt.model_dump(mode="json", by_alias=True)
    fields["statementRef"] = row.statement_ref
    return page(
        request,
        "receipt.html",
        operator,
        title=f"Receipt {iid}",
        nav="receipts",
        receipt=receipt,
        fields=fields,
        reconciliations=settled,
    )
