"""The simulator's control surface over HTTP, for `make dev` and out-of-process tests.

POST /_admin/faults      {"model": "m", "kind": "rate_limit", "retry_after": 2, "times": 1}
GET /_admin/faults       the faults in force
DELETE /_admin/faults    clear all, or ?model=m
GET /_admin/stats        {"total": n, "models": {model: {endpoint: n}}}
DELETE /_admin/stats     reset the counters
GET /_admin/requests     the ledger: ids, status and usage per request, no content
POST /_admin/models/{m}  per-model settings, e.g. {"embedding_dimensions": 64}
POST /_admin/reset       faults, counters, ledger and prompt cache back to empty
"""

from __future__ import annotations

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from providers.upstream.faults import Fault, FaultSpec
from providers.upstream.state import UpstreamState


def _state(request: Request) -> UpstreamState:
    state: UpstreamState = request.app.state.upstream
    return state


def _invalid(exc: ValidationError) -> JSONResponse:
    errors = [{"loc": list(e["loc"]), "msg": e["msg"]} for e in exc.errors()]
    return JSONResponse({"detail": errors}, 422)


async def add_fault(request: Request) -> Response:
    try:
        spec = FaultSpec.model_validate_json(await request.body())
    except ValidationError as exc:
        return _invalid(exc)
    _state(request).inject(spec.model, Fault(**spec.model_dump(exclude={"model"})))
    return JSONResponse(spec.model_dump(mode="json"), 201)


async def list_faults(request: Request) -> Response:
    return JSONResponse([f.model_dump(mode="json") for f in _state(request).faults.listing()])


async def clear_faults(request: Request) -> Response:
    _state(request).clear_faults(request.query_params.get("model"))
    return Response(status_code=204)


async def stats(request: Request) -> Response:
    return JSONResponse(_state(request).stats.snapshot())


async def reset_stats(request: Request) -> Response:
    _state(request).stats.reset()
    return Response(status_code=204)


async def ledger(request: Request) -> Response:
    return JSONResponse(_state(request).ledger_rows())


async def configure_model(request: Request) -> Response:
    try:
        settings = _state(request).configure(request.path_params["model"], **(await request.json()))
    except ValidationError as exc:
        return _invalid(exc)
    except (TypeError, ValueError):
        return JSONResponse({"detail": "expected a JSON object of settings"}, 422)
    return JSONResponse(settings.model_dump())


async def reset(request: Request) -> Response:
    _state(request).reset()
    return Response(status_code=204)


routes = [
    Route("/_admin/faults", add_fault, methods=["POST"]),
    Route("/_admin/faults", list_faults, methods=["GET"]),
    Route("/_admin/faults", clear_faults, methods=["DELETE"]),
    Route("/_admin/stats", stats, methods=["GET"]),
    Route("/_admin/stats", reset_stats, methods=["DELETE"]),
    Route("/_admin/requests", ledger, methods=["GET"]),
    Route("/_admin/models/{model:path}", configure_model, methods=["POST"]),
    Route("/_admin/reset", reset, methods=["POST"]),
]
