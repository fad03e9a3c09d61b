"""A deployment's actions in the console: each one's confirmation page and its CSRF-checked
POST (record license, evaluate, approve, retire), applied as the REST routes apply them, then
back to the deployment's page, saying it is done or, refused, showing the page with the
lifecycle's own words."""

from __future__ import annotations

import re
import uuid
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from activities.lifecycle_types import ApproveRequest
from api import evaluations, lifecycle
from api.console.deployments import (
    ACTIONS,
    TRANSITION,
    check_manage,
    check_read,
    deployment_context,
)
from api.console.render import SECURITY_HEADERS, page
from api.console.session import Changing, ConsoleError, Operator, SignedIn
from api.deps import RuntimeDep
from api.problems import Problem
from api.runtime import Runtime
from domain.access import Action
from domain.approval import IntendedUse
from domain.deployments import LicenseMetadata
from domain.enums import Scope
from store.repositories import ModelDeploymentRepository

router = APIRouter()

_KEY = re.compile(r"^[A-Za-z0-9._:/-]{1,200}$")
# A Retire reason's bound against abuse only: past the form's maxlength (lifecycle.REASON_MAX)
# the audit line cuts it, rather than the Retire being refused (a 400 from a non-browser client).
_REASON_BOUND = 4_000


@router.get("/deployment/confirm", response_class=HTMLResponse)
async def confirm(
    request: Request,
    operator: SignedIn,
    runtime: RuntimeDep,
    id: Annotated[str, Query(max_length=200)],
    action: Annotated[str, Query(max_length=20)],
) -> Response:
    check_read(operator)
    if action not in ACTIONS:
        raise ConsoleError(404, f"No action {action!r}.")
    async with runtime.sessions() as session:
        row = await ModelDeploymentRepository(session, operator.tenant_id).get(id)
    if row is None:
        raise ConsoleError(404, f"No deployment {id!r}.")
    return page(
        request,
        "confirm.html",
        operator,
        title=f"{ACTIONS[action]} {id}?",
        nav="board",
        action=action,
        action_label=ACTIONS[action],
        deployment=row,
        license=row.license_metadata or {},
        intended_uses=[u.value for u in IntendedUse],
        idempotency_key=uuid.uuid4().hex,
        can_manage=operator.may(Scope.MODELS_ADMIN, Action.MANAGE_DEPLOYMENTS),
        manage_needs=operator.needs(Action.MANAGE_DEPLOYMENTS),
        reason_max=lifecycle.REASON_MAX,
    )


async def _refused(
    request: Request, runtime: Runtime, operator: Operator, deployment_id: str, problem: Problem
) -> Response:
    template, context = await deployment_context(runtime, operator, deployment_id)
    return page(
        request,
        template,
        operator,
        title=f"Deployment {deployment_id}",
        nav="board",
        status=problem.status,
        problem=problem,
        refusals=problem.extensions.get("refusals") or [],
        **context,
    )


def _done(deployment_id: str, action: str) -> Response:
    return RedirectResponse(
        f"/console/deployment?id={quote(deployment_id, safe='')}&done={action}",
        status_code=303,
        headers=SECURITY_HEADERS,
    )


async def _temporal(runtime: Runtime) -> Any:
    client = await runtime.temporal()
    if client is None:
        raise ConsoleError(503, "Temporal is not reachable; try again shortly.")
    return client


async def _apply(
    request: Request,
    runtime: Runtime,
    operator: Operator,
    deployment_id: str,
    action: str,
    arg: Any = None,
    *,
    reason: str = "",
) -> Response:
    """One lifecycle action, as the REST route applies it, on behalf of the operator (whom the
    audit line names), then back to the deployment's page saying it is done."""
    transition = TRANSITION[action]
    try:
        await lifecycle.transition(
            await _temporal(runtime),
            runtime.sessions,
            runtime.settings.temporal_task_queue,
            operator.tenant_id,
            deployment_id,
            transition,
            arg,
            actor=operator.principal,
            reason=reason,
        )
    except Problem as problem:
        # Already where the action leads (a double-clicked Retire: the second POST was
        # refused, and the page said "Refused (409)" although the first had done it).
        if not lifecycle.already_done(problem, transition):
            return await _refused(request, runtime, operator, deployment_id, problem)
    return _done(deployment_id, action)


@router.post("/deployment/license", response_class=HTMLResponse)
async def record_license(
    request: Request,
    operator: Changing,
    runtime: RuntimeDep,
    id: Annotated[str, Form(max_length=200)],
    license_name: Annotated[str, Form(max_length=200)] = "",
    terms: Annotated[list[str] | None, Form()] = None,
) -> Response:
    check_manage(operator)
    chosen = set(terms or [])
    unknown = chosen - {u.value for u in IntendedUse}
    if unknown:
        raise ConsoleError(400, f"Unknown license term {sorted(unknown)[0]!r}.")
    body = LicenseMetadata.model_validate(
        {u.value: u.value in chosen for u in IntendedUse}
        | {"licenseName": license_name.strip() or None}
    )
    return await _apply(request, runtime, operator, id, "license", body)


@router.post("/deployment/evaluate", response_class=HTMLResponse)
async def evaluate(
    request: Request,
    operator: Changing,
    runtime: RuntimeDep,
    id: Annotated[str, Form(max_length=200)],
    idempotency_key: Annotated[str, Form(max_length=200)],
) -> Response:
    check_manage(operator)
    if not _KEY.match(idempotency_key):
        raise ConsoleError(400, "The form's idempotency key is malformed; reload the page.")
    try:  # evaluations.start owns the refusals (404, 409 Retired), as for the API
        await evaluations.start(
            await _temporal(runtime),
            runtime.sessions,
            runtime.settings.temporal_task_queue,
            runtime.settings.evaluation_concurrency,
            operator.tenant_id,
            id,
            idempotency_key,
        )
    except Problem as problem:
        return await _refused(request, runtime, operator, id, problem)
    return _done(id, "evaluate")


@router.post("/deployment/approve", response_class=HTMLResponse)
async def approve(
    request: Request,
    operator: Changing,
    runtime: RuntimeDep,
    id: Annotated[str, Form(max_length=200)],
    intended_use: Annotated[list[str] | None, Form()] = None,
) -> Response:
    check_manage(operator)
    try:
        uses = [IntendedUse(u) for u in (intended_use or [IntendedUse.COMMERCIAL_USE.value])]
    except ValueError:
        raise ConsoleError(400, "Unknown intended use.") from None
    return await _apply(
        request, runtime, operator, id, "approve", ApproveRequest(intended_use=uses)
    )


@router.post("/deployment/retire", response_class=HTMLResponse)
async def retire(
    request: Request,
    operator: Changing,
    runtime: RuntimeDep,
    id: Annotated[str, Form(max_length=200)],
    reason: Annotated[str, Form(max_length=_REASON_BOUND)] = "",
) -> Response:
    check_manage(operator)
    return await _apply(request, runtime, operator, id, "retire", reason=reason)
