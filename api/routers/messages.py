"""Anthropic's Messages surface: `model` is a profile id; the official anthropic SDK works
unchanged with its base URL at the gateway. The same routing, pinned plans, receipts,
idempotency, budgets and resilience as every surface; errors in Anthropic's envelope."""

from __future__ import annotations

import json

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from activities.invoke_outcomes import estimate_tokens
from api.anthropic_answers import ToolInputInvalid, message_body
from api.anthropic_errors import ERROR_RESPONSES, error_envelope
from api.anthropic_shapes import CountTokensIn, MessagesIn, to_chat_request
from api.anthropic_stream import MessageEvents
from api.deps import ApiKeyInvoker, RuntimeDep
from api.invocation_events import Running
from api.problems import Problem
from api.surface import CallHeaders, Service
from api.token_count import count_input_tokens
from api.wire import (
    answer_chat,
    receipt_headers,
    receipt_view,
)
from domain.invocation import InvocationSummary
from providers.types import Completion

router = APIRouter(prefix="/v1", tags=["anthropic-messages"])

Invoker = ApiKeyInvoker
# Every error under this prefix is rendered in Anthropic's envelope (api/problems.py).
ENVELOPE = ("/v1/messages", error_envelope)


@router.post(
    "/messages", operation_id="CreateMessage", response_model=None, responses=ERROR_RESPONSES
)
async def create_message(
    body: MessagesIn,
    request: Request,
    principal: Invoker,
    service: Service,
    headers: CallHeaders,
) -> Response:
    chat = to_chat_request(body)
    call = headers.chat_call(body.model, chat, buffered=not body.stream)

    def events(running: Running) -> MessageEvents:
        # The estimate an Estimated receipt would carry (the canonical request's length).
        estimate = estimate_tokens(json.dumps(call.payload))
        return MessageEvents(running.invocation_id, body.model, estimate)

    async def whole(running: Running, done: Completion, summary: InvocationSummary) -> Response:
        try:
            answer = message_body(running.invocation_id, body.model, done, summary)
        except ToolInputInvalid as exc:
            # The provider answered (its receipt says so, and what it cost), in words Messages
            # cannot carry; another try may be answered well, so the SDK retries it. Not with
            # the same key: that replays this answer, and the same 502, for good (the SDK's two
            # retries were two replays, nothing telling the caller to use a new key).
            keyed = call.idempotency_key is not None or running.replay
            detail = f"The model's answer cannot be given as a message: {exc}."
            if keyed:
                detail += " This key replays it: retry with a new Idempotency-Key."
            raise Problem(
                502,
                detail,
                headers={
                    **receipt_headers(summary),
                    **({"x-should-retry": "false"} if keyed else {}),
                },
                **receipt_view(summary),
                errorClass="transient",
            ) from None
        answer["model_router"] = receipt_view(summary)  # an extra field the SDK keeps
        return JSONResponse(answer, headers=receipt_headers(summary))

    stream = events if body.stream else None
    # A failure's status is Anthropic's for its kind (the envelope's, api/wire.failure_response).
    return await answer_chat(request, service, principal, call, stream=stream, whole=whole)


@router.post("/messages/count_tokens", operation_id="CountMessageTokens", responses=ERROR_RESPONSES)
async def count_tokens(
    body: CountTokensIn,
    principal: Invoker,
    runtime: RuntimeDep,
    headers: CallHeaders,
    response: Response,
) -> dict[str, int]:
    """The count of the deployment the profile routes to now, when its provider counts tokens
    (Anthropic); else our estimate (the one an Estimated receipt carries). The header
    `X-Model-Router-Token-Count` says which (`deployment` or `estimate`). Counting is free at
    the provider, so nothing is billed and there is no receipt."""
    chat = to_chat_request(body)
    counted = await count_input_tokens(runtime, principal, body.model, chat, headers)
    source = "estimate" if counted is None else "deployment"
    response.headers["X-Model-Router-Token-Count"] = source
    if counted is None:
        counted = estimate_tokens(json.dumps(chat.model_dump(mode="json")))
    return {"input_tokens": counted}
