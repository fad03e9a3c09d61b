"""The deployments board, a deployment's page and its evaluation panel, and what the
actions' module (`deployment_actions.py`) shares with them: the actions a state offers, what
each says once done, and who may read or manage deployments.

Every action goes through the same service the REST router uses (`api/lifecycle.py`,
`api/evaluations.py`): the lifecycle workflow decides what is legal and words every refusal;
the console shows those words."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError

from api import evaluations
from api.console.landing import landing
from api.console.profiles import readable, unreadable_profile
from api.console.render import SECURITY_HEADERS, page
from api.console.session import PATH, ConsoleError, Operator, SignedIn
from api.deps import RuntimeDep
from api.runtime import Runtime
from api.views import deployment_views
from core.schedule_spec import period_minutes
from domain.access import Action
from domain.approval import evidence_refusals
from domain.enums import Capability, DeploymentState, Scope
from domain.health import probe_stale
from domain.lifecycle import Transition, transitions_from
from store import console_reads
from store.repositories import ModelDeploymentRepository, ModelProfileRepository
from store.tables import ModelDeploymentRow
from store.views import deployment_record

router = APIRouter()

ACTIONS = {
    "license": "Record license",
    "evaluate": "Evaluate",
    "approve": "Approve",
    "retire": "Retire",
}
# What each action asks of the lifecycle: a page offers only those its state takes (Approve
# was offered on a Retired deployment, and a double click showed the second click's refusal).
TRANSITION = {
    "license": Transition.RECORD_LICENSE,
    "evaluate": Transition.RECORD_EVIDENCE,
    "approve": Transition.APPROVE,
    "retire": Transition.RETIRE,
}
# What the page says once an action went through: an evaluation has only begun.
DONE = {
    "license": "Record license: done",
    "evaluate": "Evaluate: started, its progress below",
    "approve": "Approve: done",
    "retire": "Retire: done",
}


def check_read(operator: Operator) -> None:
    if not operator.may(Scope.MODELS_ADMIN, Action.READ_DEPLOYMENTS):
        raise ConsoleError(
            403,
            f"This page {operator.needs(Action.READ_DEPLOYMENTS)} and factory.models.admin.",
        )


def check_manage(operator: Operator) -> None:
    if not operator.may(Scope.MODELS_ADMIN, Action.MANAGE_DEPLOYMENTS):
        raise ConsoleError(
            403,
            f"This action {operator.needs(Action.MANAGE_DEPLOYMENTS)} and factory.models.admin.",
        )


@dataclass(frozen=True)
class Unreadable:
    """A deployment whose stored row does not read as its record (a license written before a
    rule was tightened, or by hand; the lifecycle refuses such a row as ROW_UNREADABLE): one
    made the whole board a 500. The board shows it as such, among the others."""

    deployment_id: str
    state: DeploymentState
    unreadable: bool = True  # what the board's card asks of each deployment


def _readable(rows: list[ModelDeploymentRow]) -> tuple[list[ModelDeploymentRow], list[Unreadable]]:
    good: list[ModelDeploymentRow] = []
    bad: list[Unreadable] = []
    for row in rows:
        try:
            deployment_record(row)
        except ValidationError:
            bad.append(Unreadable(row.deployment_id, row.state))
        else:
            good.append(row)
    return good, bad


def _unreadable_detail(deployment_id: str, exc: ValidationError) -> str:
    # The fields only, as the lifecycle's refusal names them: never the stored values.
    fields = sorted({".".join(str(p) for p in e["loc"]) for e in exc.errors()})
    return (
        f"Deployment {deployment_id!r}'s stored record does not read as this version reads it "
        f"({', '.join(fields)}; written before a rule was tightened, or by hand): correct the "
        "row, then ask again."
    )


@router.get("", response_class=HTMLResponse)
async def board(request: Request, operator: SignedIn, runtime: RuntimeDep) -> Response:
    if not operator.may(Scope.MODELS_ADMIN, Action.READ_DEPLOYMENTS):
        # The console's address is every client's way in (its error pages link back here, an
        # SSO proxy opens it): one that may read no deployments is sent to its first page.
        first = landing(operator.principal.roles, operator.principal.scopes)
        if first != PATH:
            return RedirectResponse(first, status_code=303, headers=SECURITY_HEADERS)
    check_read(operator)
    async with runtime.sessions() as session:
        rows, unreadable = _readable(
            list(await ModelDeploymentRepository(session, operator.tenant_id).list())
        )
        views = await deployment_views(session, operator.tenant_id, rows)
        probes = await console_reads.last_probes(session, operator.tenant_id)
    stale = _stale_probes(runtime, {v.deployment_id: v.state for v in views}, probes)
    columns: dict[str, list[Any]] = {state.value: [] for state in DeploymentState}
    for view in views:
        columns[view.state.value].append(view)
    for card in unreadable:
        columns[card.state.value].append(card)
    return page(
        request,
        "board.html",
        operator,
        title="Deployments",
        nav="board",
        columns=columns,
        probes=probes,
        stale_probes=stale,
        total=len(views) + len(unreadable),
    )


def _stale_probes(
    runtime: Runtime, states: dict[str, DeploymentState], probes: dict[str, Any]
) -> set[str]:
    """The deployments whose last probe is older than the probe schedule explains: with it
    paused, "ok · 45 ms" stayed on screen for days, with no time."""
    period, now = period_minutes(runtime.settings.health_probe_cron), datetime.now(UTC)
    return {
        d
        for d, p in probes.items()
        if d in states and probe_stale(states[d], p.probed_at, now, period)
    }


async def deployment_context(
    runtime: Runtime, operator: Operator, deployment_id: str
) -> tuple[str, dict[str, Any]]:
    """The deployment page's template and context: the page itself, or, for a row that does
    not read as its record, what can be shown of it and why the rest cannot."""
    tenant = operator.tenant_id
    async with runtime.sessions() as session:
        row = await ModelDeploymentRepository(session, tenant).get(deployment_id)
        if row is None:
            raise ConsoleError(404, f"No deployment {deployment_id!r}.")
        unreadable = ""
        try:
            view = (await deployment_views(session, tenant, [row]))[0]
        except ValidationError as exc:
            view, unreadable = None, _unreadable_detail(deployment_id, exc)
        # Every active version, as the approval gate checks them (activities/lifecycle.py):
        # the newest alone showed every threshold met while approval was refused by an older
        # version still active. One that does not read is named, not a 500: the gate refuses
        # approval on it (StoredRecordUnreadable).
        listing, bad = readable(
            p
            for p in await ModelProfileRepository(session, tenant).list_active()
            if deployment_id in (p.allowed_deployments or [])
        )
        history = await console_reads.deployment_history(session, tenant, deployment_id)
        probe = (await console_reads.last_probes(session, tenant)).get(deployment_id)
    evaluation = await evaluations.latest(
        await runtime.temporal(), runtime.sessions, tenant, deployment_id
    )
    actions = {
        k: label for k, label in ACTIONS.items() if TRANSITION[k] in transitions_from(row.state)
    }
    can_manage = operator.may(Scope.MODELS_ADMIN, Action.MANAGE_DEPLOYMENTS)
    if view is None:
        return "deployment_unreadable.html", {
            "deployment_id": deployment_id,
            "state": row.state,
            "unreadable": unreadable,
            "evaluation": evaluation,
            "history": history,
            "history_limit": console_reads.HISTORY_LIMIT,
            "actions": actions,
            "can_manage": can_manage,
            "manage_needs": operator.needs(Action.MANAGE_DEPLOYMENTS),
        }
    scores = {c: e.score for c, e in view.evidence.capabilities.items() if e.score is not None}
    # The approval gate's own rule says which thresholds fall short, and how it words them.
    shortfalls = {
        (p.profile_id, p.version, r.capability): r.message
        for p in listing
        for r in evidence_refusals(scores, [p])
    }
    return "deployment.html", {
        "deployment": view,
        "capabilities": [c.value for c in Capability],
        "profiles": listing,
        "unreadable_profiles": [unreadable_profile(r.profile_id, r.version) for r in bad],
        "shortfalls": shortfalls,
        "evaluation": evaluation,
        "history": history,
        "history_limit": console_reads.HISTORY_LIMIT,
        "probe": probe,
        "probe_stale": bool(
            probe and _stale_probes(runtime, {deployment_id: view.state}, {deployment_id: probe})
        ),
        "actions": actions,
        "can_manage": can_manage,
        "manage_needs": operator.needs(Action.MANAGE_DEPLOYMENTS),
    }


@router.get("/deployment", response_class=HTMLResponse)
async def deployment_page(
    request: Request,
    operator: SignedIn,
    runtime: RuntimeDep,
    id: Annotated[str, Query(max_length=200)],
    done: Annotated[str | None, Query(max_length=20)] = None,
) -> Response:
    check_read(operator)
    template, context = await deployment_context(runtime, operator, id)
    return page(
        request,
        template,
        operator,
        title=f"Deployment {id}",
        nav="board",
        done=DONE.get(done or ""),
        **context,
    )


@router.get("/deployment/evaluation", response_class=HTMLResponse)
async def evaluation_fragment(
    request: Request,
    operator: SignedIn,
    runtime: RuntimeDep,
    id: Annotated[str, Query(max_length=200)],
) -> Response:
    """The evaluation panel alone, which the page's script re-fetches while one runs."""
    check_read(operator)
    async with runtime.sessions() as session:
        if await ModelDeploymentRepository(session, operator.tenant_id).get(id) is None:
            raise ConsoleError(404, f"No deployment {id!r}.")
    evaluation = await evaluations.latest(
        await runtime.temporal(), runtime.sessions, operator.tenant_id, id
    )
    return page(
        request,
        "evaluation_panel.html",
        operator,
        title="Evaluation",
        evaluation=evaluation,
        deployment_id=id,
    )
