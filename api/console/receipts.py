"""Receipts: the recent ones (or one run's), filterable by outcome, usage status, deployment and
profile, and one receipt with every field. Receipts hold no content, only hashes and artifact
references, and so does every page here.

The tenant's receipts at large (every project's runs, keys and spend) are for the roles that
watch its operations; a Requester opens one run's by its id, as the API gives it only
/factory/runs/{runId}/model-receipts (domain.access.reading_receipts)."""

from __future__ import annotations

import uuid
from typing import Annotated, TypeVar
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response
from sqlalchemy.ext.asyncio import AsyncSession

from api.console.overview_data import IN_FLIGHT
from api.console.render import page
from api.console.session import ConsoleError, Operator, SignedIn
from api.deps import RuntimeDep
from api.routers.receipts import Receipt
from domain.access import Action, reading_receipts
from domain.enums import InvocationOutcome, Scope, UsageStatus
from store import console_reads
from store.tables import InvocationReceiptRow

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
    # Bounded by _run_filter, not here: a Query bound answered a longer paste with the bare
    # error page, the form and the other filters gone.
    run_id: str | None = None,
    before: Annotated[str | None, Query(max_length=40)] = None,
) -> Response:
    _read(operator)
    run, typed, error = _run_filter(run_id)
    filters = {
        "outcome": outcome or "",
        "usage_status": usage_status or "",
        "deployment_id": deployment_id or "",
        "profile_id": profile_id or "",
        # The run as the receipts' links name it, so the receipt page knows it for the same.
        "run_id": str(run) if run else typed,
    }
    # A run id typed, even one that is no UUID, is a read of one run (that one lists nothing
    # and says why beside its field).
    wants = reading_receipts(of_one_run=bool(typed))
    if not operator.may(Scope.RUNS_READ, wants):
        return _one_run_only(request, operator, filters, wants)
    after = None
    async with runtime.sessions() as session:
        if before:
            after = await _page_start(session, operator.tenant_id, before)
        where = console_reads.ReceiptFilter(
            outcome=_enum(InvocationOutcome, outcome),
            usage_status=_enum(UsageStatus, usage_status),
            deployment_id=deployment_id or None,
            profile_id=profile_id or None,
            run_id=run,
            before=after,
        )
        rows = [] if error else await console_reads.receipts(session, operator.tenant_id, where)
        deployments, profiles = await console_reads.distinct_values(session, operator.tenant_id)
    older = None
    if len(rows) > where.limit:
        rows = rows[: where.limit]
        # The next page: the same filters, older than this page's last receipt.
        query = {**{k: v for k, v in filters.items() if v}, "before": str(rows[-1].invocation_id)}
        older = f"{request.url.path}?{urlencode(query)}"
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
        filters=filters,
        limit=where.limit,
        older=older,
        paged=after is not None,
        error=error,
        status=400 if error else 200,
    )


# The longest run id read: `urn:uuid:` and braces around a hyphenated UUID fit with room. A
# longer value is no run id, said so before any work is done on it, and shown cut to this.
RUN_ID_MAX = 64
NOT_A_RUN = "Run id: not a UUID (copy it from a receipt, or leave it empty)."


def run_of(value: str | None) -> uuid.UUID | None:
    """The run a typed run id names, in any form uuid.UUID reads (any case, with or without
    hyphens, braces or `urn:uuid:`), its surrounding whitespace (a paste's trailing newline)
    ignored; None for none, or for anything else."""
    typed = (value or "").strip()
    if not typed or len(typed) > RUN_ID_MAX:
        return None
    try:
        return uuid.UUID(typed)
    except ValueError:
        return None


def _run_filter(value: str | None) -> tuple[uuid.UUID | None, str, str | None]:
    """The run filter: the run, what was typed (stripped, cut to the bound, as the field shows
    it again), and the error said beside the field when it names no run. Said there, the other
    filters as they were typed: the bare error page lost them all."""
    typed = (value or "").strip()
    run = run_of(typed)
    if typed and run is None:
        return None, typed[:RUN_ID_MAX], NOT_A_RUN
    return run, typed, None


def _one_run_only(
    request: Request, operator: Operator, filters: dict[str, str], wants: Action
) -> Response:
    """The refusal of the tenant's receipts at large, as a page with the filters and no
    receipts: the run id field is the way to what its holder may read. Nothing is read for it
    (the filter lists would name the tenant's deployments and profiles)."""
    return page(
        request,
        "receipts.html",
        operator,
        title="Not allowed",
        nav="receipts",
        receipts=[],
        outcomes=[o.value for o in InvocationOutcome],
        statuses=[s.value for s in UsageStatus],
        deployments=[filters["deployment_id"]] if filters["deployment_id"] else [],
        profiles=[filters["profile_id"]] if filters["profile_id"] else [],
        filters=filters,
        limit=console_reads.ReceiptFilter().limit,
        older=None,
        paged=False,
        error=None,
        refused=(
            f"Reading every run's receipts {operator.needs(wants)}. One run's receipts open "
            "with its run id: enter it below (as the API's /factory/runs/{runId}/model-receipts "
            "takes it)."
        ),
        status=403,
    )


async def _page_start(session: AsyncSession, tenant_id: str, before: str) -> InvocationReceiptRow:
    try:
        found = await console_reads.receipt(session, tenant_id, uuid.UUID(before))
    except ValueError:
        found = None
    if found is None:
        raise ConsoleError(400, "That page starts at no receipt of this tenant.")
    return found


@router.get("/receipts/{invocation_id}", response_class=HTMLResponse)
async def receipt_page(
    request: Request,
    invocation_id: str,
    operator: SignedIn,
    runtime: RuntimeDep,
    run_id: str | None = None,
) -> Response:
    """One receipt. A reader of one run's receipts (a Requester) opens those of the run it
    names (`run_id`, as its run's list links them), not any of the tenant's: invocation ids are
    derived from idempotency keys, which a neighbour's may guess."""
    _read(operator)
    try:
        iid = uuid.UUID(invocation_id)
    except ValueError:
        raise ConsoleError(404, f"No receipt {invocation_id!r}.") from None
    async with runtime.sessions() as session:
        row = await console_reads.receipt(session, operator.tenant_id, iid)
        # Compared as UUIDs: the run named in any form its list takes (upper case, say) is
        # the same run; compared as text, each receipt its list linked was a 404.
        run = run_of(run_id)
        of_its_run = row is not None and run is not None and row.run_id == run
        if row is None or not operator.may(
            Scope.RUNS_READ, reading_receipts(of_one_run=of_its_run)
        ):
            # The same answer whether it exists or not: a guess learns nothing.
            raise ConsoleError(404, f"No receipt {invocation_id!r}.")
        settled = await console_reads.reconciliations(session, operator.tenant_id, iid)
    receipt = Receipt.model_validate(row)
    fields = receipt.model_dump(mode="json", by_alias=True)
    fields["statementRef"] = row.statement_ref
    if row.ended_at is None:
        # An open receipt holds its claim's placeholders (outcome Failed, usage Unknown) until
        # the call closes: under the "In flight" badge the table said Failed and Unknown.
        fields |= {"outcome": IN_FLIGHT, "usageStatus": None, "estimatedCostUsd": None}
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
