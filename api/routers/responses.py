"""OpenAI's Responses surface, stateless: `model` is a profile id; the official openai SDK's
`responses.create` and `responses.stream` work unchanged. The same routing, pinned plans,
receipts, idempotency, budgets and resilience as every surface."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from api.deps import require
from api.responses_shapes import (
    ERROR_RESPONSES,
    ResponsesIn,
    error_envelope,
    output_items,
    response_body,
    status_of,
    to_chat_request,
)
from api.responses_stream import ResponseEvents
from api.surface import CallHeaders, Service
from api.wire import (
    collect,
    failed_early,
    failure_response,
    first_event,
    receipt_headers,
    receipt_view,
    relay,
    stream_headers,
)
from core.security import Principal
from domain.access import Action
from domain.enums import InvocationOutcome, Scope

router = APIRouter(prefix="/v1", tags=["openai-responses"])

Invoker = Annotated[Principal, Depends(require(Scope.MODELS_INVOKE, Action.INVOKE))]
# Errors under this prefix carry OpenAI's `error` member too (api/problems.py).
ENVELOPE = ("/v1/responses", error_envelope)


@router.post(
    "/responses", operation_id="CreateResponse", response_model=None, responses=ERROR_RESPONSES
)
async def create_response(
    body: ResponsesIn,
    request: Request,
    principal: Invoker,
    service: Service,
    headers: CallHeaders,
) -> Response:
    chat = to_chat_request(body)
    call = headers.chat_call(body.model, chat, buffered=not body.stream)
    created = time.time()
    running = await service.start(principal, call)
    first = await first_event(running)
    early = failed_early(first)
    if early is not None:
        return failure_response(request, early, service.retry_after(principal, running))
    if body.stream:
        return StreamingResponse(
            relay(running, first, ResponseEvents(running.invocation_id, body)),
            media_type="text/event-stream",
            # The deployment is named only once the output says who answered; the stream's
            # receipt event names it in any case.
            headers={**stream_headers(running, first), "Cache-Control": "no-store"},
        )
    completion, summary = await collect(running, first)
    if summary.outcome is not InvocationOutcome.COMPLETED or completion is None:
        return failure_response(request, summary, service.retry_after(principal, running))
    status, incomplete = status_of(completion.finish_reason)
    answer = response_body(
        running.invocation_id,
        body,
        status=status,
        created_at=created,
        output=output_items(running.invocation_id, completion),
        summary=summary,
        incomplete=incomplete,
    )
    answer["model_router"] = receipt_view(summary)  # an extra field the SDK keeps
    return JSONResponse(answer, headers=receipt_headers(summary))
