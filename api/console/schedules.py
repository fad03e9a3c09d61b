"""The scheduled jobs (health probe, receipt reconciler): last and next run from Temporal's
schedule descriptions, and "run now" (a schedule trigger) for the platform's admins: a
PlatformAdmin of a tenant listed in `platform_tenants`."""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from temporalio.service import RPCError, RPCStatusCode

from api.console.render import SECURITY_HEADERS, page
from api.console.session import Changing, ConsoleError, Operator, SignedIn
from api.deps import RuntimeDep
from api.runtime import Runtime
from core.schedule_spec import spec_text
from core.schedules import NAMES, schedule_id
from domain.access import Action
from domain.enums import Role, Scope

router = APIRouter()
log = logging.getLogger("model_router.console")


def _read(operator: Operator) -> None:
    if not operator.may(Scope.MODELS_ADMIN, Action.READ_DEPLOYMENTS):
        raise ConsoleError(403, "Schedules are visible to PlatformAdmin, Operator and Observer.")


def _unavailable(exc: RPCError) -> ConsoleError:
    """Temporal answered with an error of its own (it went away after the connect): the page's
    503, not a JSON 500."""
    log.warning("console: schedule request refused: %s", exc.status.name)
    return ConsoleError(503, "Temporal did not answer; try again shortly.")


# Why Run now is not offered (the page) or refused (a POST). The setting is named: a tenant's
# PlatformAdmin told only "PlatformAdmin" could not tell why its role was not enough.
NOT_PLATFORM = (
    "Run now is for a PlatformAdmin of a platform tenant (the setting "
    "MODEL_ROUTER_PLATFORM_TENANTS lists them): these schedules serve every tenant, and the "
    "health probe spends every tenant's provider keys."
)


def _may_trigger(operator: Operator, runtime: Runtime) -> bool:
    # Schedules are platform-wide (all tenants' probes and receipts): every tenant has its own
    # PlatformAdmin, so the role alone let any tenant's admin spend the others' provider keys.
    return (
        Role.PLATFORM_ADMIN in operator.principal.roles
        and operator.tenant_id in runtime.settings.platform_tenants
    )


async def _describe(client: Any, sid: str) -> dict[str, Any]:
    try:
        description = await client.get_schedule_handle(sid).describe()
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            return {"id": sid, "exists": False}
        raise _unavailable(exc) from None
    info = description.info
    recent = info.recent_actions[-1] if info.recent_actions else None
    return {
        "id": sid,
        "exists": True,
        "paused": description.schedule.state.paused,
        "note": description.schedule.state.note,
        # As the schedule is on the server: the worker's settings made it, and this process's
        # may say otherwise.
        "cron": spec_text(description.schedule.spec),
        "last": recent.started_at if recent else None,
        "last_workflow": recent.action.workflow_id if recent else None,
        "next": info.next_action_times[0] if info.next_action_times else None,
        "actions": info.num_actions,
    }


@router.get("/schedules", response_class=HTMLResponse)
async def schedules(
    request: Request, operator: SignedIn, runtime: RuntimeDep, done: str | None = None
) -> Response:
    _read(operator)
    client = await runtime.temporal()
    if client is None:
        raise ConsoleError(503, "Temporal is not reachable; try again shortly.")
    settings = runtime.settings
    rows = [
        {
            "name": name,
            **(await _describe(client, schedule_id(settings, name))),
        }
        for name in NAMES
    ]
    return page(
        request,
        "schedules.html",
        operator,
        title="Schedules",
        nav="schedules",
        schedules=rows,
        can_trigger=_may_trigger(operator, runtime),
        not_platform=NOT_PLATFORM,
        done=done if done in NAMES else None,
    )


@router.post("/schedules/run", response_class=HTMLResponse)
async def run_now(
    request: Request,
    operator: Changing,
    runtime: RuntimeDep,
    name: Annotated[str, Form(max_length=100)],
) -> Response:
    _read(operator)
    if not _may_trigger(operator, runtime):
        raise ConsoleError(403, NOT_PLATFORM)
    if name not in NAMES:
        raise ConsoleError(404, f"No schedule {name!r}.")
    client = await runtime.temporal()
    if client is None:
        raise ConsoleError(503, "Temporal is not reachable; try again shortly.")
    try:
        await client.get_schedule_handle(schedule_id(runtime.settings, name)).trigger()
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            raise ConsoleError(404, f"The schedule {name} does not exist (yet).") from None
        raise _unavailable(exc) from None
    log.info("console: schedule %s triggered by %s", name, operator.principal.client_id)
    return RedirectResponse(
        f"/console/schedules?done={name}", status_code=303, headers=SECURITY_HEADERS
    )
