"""OpenAI's Responses surface, stateless: `model` is a profile id; the official openai SDK's
`responses.create` and `responses.stream` work unchanged. The same routing, pinned plans,
receipts, idempotency, budgets and resilience as every surface. A request's references to
this gateway's own output items are read from their stored answers first
(api/responses_references.py)."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response

from api.deps import RuntimeDep, require
from api.invocation_events import Running
from api.openai_errors import ERROR_RESPONSES, error_envelope
from api.responses_answers import output_items, response_body, status_of
from api.responses_references import kept
from api.responses_shapes import ResponsesIn, references, to_chat_request
from api.responses_stream import ResponseEvents
from api.surface import CallHeaders, Service
from api.wire import (
    answer_chat,
    receipt_headers,
    receipt_view,
)
from core.security import Principal
from domain.access import Action
from domain.enums import Scope
from domain.invocation import InvocationSummary
from providers.types import Completion

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
    runtime: RuntimeDep,
) -> Response:
    chat = to_chat_request(body, await kept(runtime, principal.tenant_id, references(body)))
    call = headers.chat_call(body.model, chat, buffered=not body.stream)
    created = time.time()

    def events(running: Running) -> ResponseEvents:
        return ResponseEvents(running.invocation_id, body)

    async def whole(running: Running, done: Completion, summary: InvocationSummary) -> Response:
        status, incomplete = status_of(done.finish_reason, done.refusal)
        answer = response_body(
            running.invocation_id,
            body,
            status=status,
            created_at=created,
            output=output_items(running.invocation_id, done),
            summary=summary,
            incomplete=incomplete,
        )
        answer["model_router"] = receipt_view(summary)  # an extra field the SDK keeps
        return JSONResponse(answer, headers=receipt_headers(summary))

    stream = events if body.stream else None
    return await answer_chat(request, service, principal, call, stream=stream, whole=whole)
