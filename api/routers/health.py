"""Liveness and readiness: `/readyz` says whether this process can serve an invocation now
(every dependency answering), `/readyz/process` whether it is started and fit to serve once
they answer (what a load balancer in front of several should ask)."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy import text

from api.deps import RuntimeDep
from api.problems import problem_response

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", response_model=None)
async def readyz(request: Request, runtime: RuntimeDep) -> JSONResponse | dict[str, object]:
    checks = {
        "database": await _database_ok(runtime),
        "schema": await _schema_ok(request, runtime),
        "temporal": await _temporal_ok(runtime),
        "invocationWorkers": _workers_ok(runtime),
    }
    if all(checks.values()):
        return {"status": "ready", "checks": checks}
    down = ", ".join(name for name, ok in checks.items() if not ok)
    return problem_response(request, 503, f"Not ready: {down} not available.", checks=checks)


@router.get("/readyz/process", response_model=None)
async def readyz_process(request: Request, runtime: RuntimeDep) -> JSONResponse | dict[str, object]:
    """This process's own readiness, for a load balancer in front of several: what only this
    process can lack. It has started (its invoke path was set up, Temporal reached once) on a
    database with every migration it needs. A shared dependency's outage (the database,
    Temporal) is every process's at once: `/readyz` then takes them all out of the Service
    together, and callers met the ingress's bare 503 instead of this gateway's own prompt 503
    with `Retry-After`, keyed retries that the store could replay included."""
    checks = {
        "schema": await _schema_ok(request, runtime),
        # Connected once (a first connect is tried here, as on `/readyz`); later outages are
        # every process's, and each answers them with its own 503. Its in-process workers are
        # not asked: they are built again after any Temporal outage, every process's at once
        # and for up to their backoff after Temporal is back (counted, the Service emptied
        # then), and a rebuild of this process's own ends by itself.
        "started": await runtime.temporal() is not None,
    }
    if all(checks.values()):
        return {"status": "ready", "checks": checks}
    down = ", ".join(name for name, ok in checks.items() if not ok)
    return problem_response(request, 503, f"Not ready: {down}.", checks=checks)


async def _database_ok(runtime: RuntimeDep) -> bool:
    try:
        async with asyncio.timeout(3), runtime.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
        return True
    except Exception:
        return False


async def _schema_ok(request: Request, runtime: RuntimeDep) -> bool:
    """Whether the database has every migration this code needs. A rollout whose migration did
    not run (a Job left from the last release, which Kubernetes will not change) went ready and
    answered 500s on missing columns. Checked until it holds once: a schema does not go back."""
    if getattr(request.app.state, "schema_current", False):
        return True
    from store.migrate import schema_behind  # alembic: imported by the first check, not at start

    try:
        async with asyncio.timeout(3), runtime.engine.connect() as conn:
            current = (await conn.execute(text("SELECT version_num FROM alembic_version"))).scalar()
    except Exception:
        current = None  # no version table: nothing migrated (or the store is down, said above)
    # Off the loop: the first look reads the migration scripts from disk.
    if await asyncio.to_thread(schema_behind, current):
        return False
    request.app.state.schema_current = True
    return True


async def _temporal_ok(runtime: RuntimeDep) -> bool:
    """What the invoke path would say: not ready while it refuses invocations; otherwise a
    health check (with the SDK's retries), whose failure makes it refuse them too."""
    if await runtime.temporal() is None:
        return False
    gate = runtime.invoke.gate
    if gate is None:
        return False
    if gate.down:
        return False
    if await gate.healthy():
        return True
    gate.mark_down("health check failed")
    return False


def _workers_ok(runtime: RuntimeDep) -> bool:
    """Whether this process's in-process Temporal workers are running: while one is being built
    again the invoke path refuses calls (reason `worker-restarting`), so the process is not
    ready though Temporal may be."""
    gate = runtime.invoke.gate
    return gate is not None and gate.held is None
