"""OpenAI's Responses surface, stateless: `model` is a profile id; the official openai SDK's
`responses.create` and `responses.stream` work unchanged. The same routing, pinned plans,
receipts, idempotency, budgets and resilience as every surface. A request's references to
this gateway's own output items are read from their stored answers first
(api/responses_references.py). A stream whose call overflowed the context window before any
output is a stream ending in `response.failed` (`context_length_exceeded`), as OpenAI's is:
Codex compacts its conversation only on that event, and an HTTP 400 ended its turn."""

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
from api.responses_shapes import ResponsesIn, to_chat_request
from api.responses_stream import ResponseEvents
from api.surface import CallHeaders, Service
from api.wire import (
    SSE_HEADERS,
    answer_chat,
    receipt_headers,
    receipt_view,
)
from core.security import Principal
from domain.access import Action
from domain.enums import Scope
from domain.invocation import InvocationSummary
from providers.errors import ErrorKind
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
    # The call's classification bounds the answers its references may bring in.
    referred = await kept(runtime, principal.tenant_id, body, headers.data_classification)
    chat = to_chat_request(body, referred)
    call = headers.chat_call(body.model, chat, buffered=not body.stream)
    created = int(time.time())  # integer Unix seconds, as OpenAI's (and a replay's)

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
    failed = (lambda summary: overflow_stream(body, summary)) if body.stream else None
    return await answer_chat(
        request, service, principal, call, stream=stream, whole=whole, failed_stream=failed
    )


def overflow_stream(body: ResponsesIn, summary: InvocationSummary) -> Response | None:
    """A streamed call that overflowed the context window before any output (or a replay of
    its key, which fails the same way), as OpenAI streams it: 200, then `response.created`,
    `response.in_progress` and `response.failed` with `context_length_exceeded`. Any other
    failure stays the error response: the SDKs retry a 429 or 5xx only as a status."""
    if summary.error_kind != ErrorKind.CONTEXT_LENGTH:
        return None
    told = ResponseEvents(summary.invocation_id, body).failed_before_output(summary)
    headers = {**receipt_headers(summary), **SSE_HEADERS}
    return Response(told, media_type="text/event-stream", headers=headers)
