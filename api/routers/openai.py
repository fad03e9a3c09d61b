"""OpenAI-compatible surface: `model` is a profile id; the official SDK works unchanged.
Run, attempt, project and idempotency come as headers; the receipt id and the answering
deployment come back as headers (and, when streaming, in a final event)."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from activities.invoke_hub import ReceiptReady
from api.deps import RuntimeDep, SessionDep, require
from api.invocations import Call, Invocations, Replayed, Running
from api.openai_shapes import (
    ChatCompletionIn,
    EmbeddingsIn,
    chunk,
    completion_body,
    delta_of,
    encode_vector,
    to_chat_request,
    usage_body,
)
from api.problems import Problem, problem_response
from core.security import Principal
from domain.access import Action
from domain.enums import InvocationOutcome, Scope
from domain.invocation import InvocationSummary, Operation
from domain.policy import DataClassification
from providers.errors import ErrorKind
from providers.types import Completion, EmbeddingResult, Finish, TextDelta, ToolCallDelta
from store.repositories import ModelProfileRepository

router = APIRouter(prefix="/v1", tags=["openai-compatible"])

Invoker = Annotated[Principal, Depends(require(Scope.MODELS_INVOKE, Action.INVOKE))]
RECEIPT, DEPLOYMENT = "X-Model-Router-Receipt-Id", "X-Model-Router-Deployment"


def _service(runtime: RuntimeDep) -> Invocations:
    if runtime.invoke.service is None:
        raise Problem(
            503, "Temporal is not reachable; try again shortly.", headers={"Retry-After": "5"}
        )
    return runtime.invoke.service


Service = Annotated[Invocations, Depends(_service)]


class Headers:
    def __init__(
        self,
        run_id: Annotated[uuid.UUID | None, Header(alias="X-Run-Id")] = None,
        attempt_id: Annotated[uuid.UUID | None, Header(alias="X-Attempt-Id")] = None,
        project_id: Annotated[str, Header(alias="X-Project-Id", max_length=200)] = "default",
        idempotency_key: Annotated[
            str | None,
            Header(alias="Idempotency-Key", max_length=200, pattern=r"^[A-Za-z0-9._:/-]+$"),
        ] = None,
        data_classification: Annotated[
            DataClassification, Header(alias="X-Data-Classification")
        ] = DataClassification.INTERNAL,
        budget_usd: Annotated[Decimal | None, Header(alias="X-Budget-Usd", ge=0)] = None,
    ) -> None:
        self.budget_usd = budget_usd
        self.run_id, self.attempt_id, self.project_id = run_id, attempt_id, project_id
        self.idempotency_key, self.data_classification = idempotency_key, data_classification


CallHeaders = Annotated[Headers, Depends()]


# The request is at fault (the caller must change it); or every candidate is busy or down
# (the caller may come back); anything else is a bad gateway — which may still be transient (a
# dropped connection, a cut stream): the caller is told so, and when to come back.
_CALLER_FAULT = frozenset({"content_policy", "context_length", "invalid_request"})
_COME_BACK = frozenset({"unavailable", "rate_limit", "overloaded", "timeout", "server_error"})
_TRANSIENT = _COME_BACK | {k.value for k in ErrorKind if k.transient}


def _failure(request: Request, summary: InvocationSummary, retry_after: int) -> JSONResponse:
    kind = summary.error_kind or "provider_error"
    headers = {RECEIPT: str(summary.invocation_id), DEPLOYMENT: summary.deployment_id or ""}
    status = 400 if kind in _CALLER_FAULT else 503 if kind in _COME_BACK else 502
    if kind in _TRANSIENT:
        headers["Retry-After"] = str(retry_after)
    message = f"model call failed: {kind}"
    if summary.error_reason:
        message = f"{message}: {summary.error_reason}"
    return problem_response(
        request,
        status,
        f"The model call failed ({kind}).",
        headers=headers,
        error={"message": message, "type": kind, "code": kind},
        receiptId=str(summary.invocation_id),
        reason=summary.error_reason,
        errorClass="transient" if kind in _TRANSIENT else "permanent",
    )


async def _first(running: Running) -> Any:
    return await anext(running.events)


@router.post("/chat/completions", operation_id="CreateChatCompletion", response_model=None)
async def chat_completions(
    body: ChatCompletionIn,
    request: Request,
    principal: Invoker,
    service: Service,
    headers: CallHeaders,
) -> Response:
    chat = to_chat_request(body)
    call = Call(
        profile_id=body.model,
        project_id=headers.project_id,
        run_id=headers.run_id,
        attempt_id=headers.attempt_id,
        idempotency_key=headers.idempotency_key,
        operation=Operation.CHAT,
        payload=chat.model_dump(mode="json"),
        request=chat,
        data_classification=headers.data_classification,
        budget_usd=headers.budget_usd,
        max_output_tokens=chat.max_tokens,
        needs_tools=bool(chat.tools),
        needs_structured_output=chat.response_format is not None
        and chat.response_format.type != "text",
    )
    running = await service.start(principal, call)
    meta = {RECEIPT: str(running.invocation_id), DEPLOYMENT: running.deployment_id}
    first = await _first(running)
    if isinstance(first, ReceiptReady) and first.summary.outcome is not InvocationOutcome.COMPLETED:
        return _failure(request, first.summary, service.retry_after(principal, running))
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return StreamingResponse(
            _sse(running, first, body.model, include_usage),
            media_type="text/event-stream",
            headers={**meta, "Cache-Control": "no-store"},
        )
    completion, summary = await _collect(running, first)
    if summary.outcome is not InvocationOutcome.COMPLETED or completion is None:
        return _failure(request, summary, service.retry_after(principal, running))
    meta[DEPLOYMENT] = summary.deployment_id or running.deployment_id
    usage = usage_body(summary.input_tokens, summary.output_tokens)
    return JSONResponse(
        completion_body(running.invocation_id, body.model, completion, usage), headers=meta
    )


async def _collect(running: Running, first: Any) -> tuple[Completion | None, InvocationSummary]:
    from providers.types import CompletionBuilder

    builder = CompletionBuilder()
    item = first
    while True:
        if isinstance(item, ReceiptReady):
            completion = builder.build() if builder.finished else None
            return completion, item.summary
        if isinstance(item, Replayed):
            replayed = Completion.model_validate_json(item.output) if item.output else None
            receipt = await anext(running.events)
            return replayed, receipt.summary
        if isinstance(item, TextDelta | ToolCallDelta | Finish):
            builder.add(item)
        item = await anext(running.events)


def _sse_line(data: Any) -> bytes:
    return f"data: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


async def _sse(
    running: Running, first: Any, profile: str, include_usage: bool
) -> AsyncIterator[bytes]:
    inv = running.invocation_id
    yield _sse_line(chunk(inv, profile, {"role": "assistant", "content": ""}))
    item: Any = first
    while True:
        if isinstance(item, Replayed):
            for event in _replay_events(item):
                delta, finish = delta_of(event)
                yield _sse_line(chunk(inv, profile, delta, finish))
        elif isinstance(item, TextDelta | ToolCallDelta | Finish):
            delta, finish = delta_of(item)
            yield _sse_line(chunk(inv, profile, delta, finish))
        elif isinstance(item, ReceiptReady):
            summary = item.summary
            if summary.outcome is not InvocationOutcome.COMPLETED:
                # A cut after output: an explicit error, never a clean terminator.
                yield _sse_line(
                    {
                        "error": {
                            "message": f"model call failed: {summary.error_kind}",
                            "type": summary.error_kind,
                            "code": summary.outcome,
                            "receiptId": str(inv),
                            "deploymentId": summary.deployment_id,
                        }
                    }
                )
                return
            if include_usage:
                yield _sse_line(
                    chunk(
                        inv, profile, usage=usage_body(summary.input_tokens, summary.output_tokens)
                    )
                )
            yield _sse_line(
                chunk(
                    inv,
                    profile,
                    model_router={
                        "receiptId": str(inv),
                        "deploymentId": summary.deployment_id,
                        "outcome": summary.outcome,
                        "usageStatus": summary.usage_status,
                        "fallbackUsed": summary.fallback_used,
                    },
                )
            )
            yield b"data: [DONE]\n\n"
            return
        item = await anext(running.events)


def _replay_events(item: Replayed) -> list[TextDelta | ToolCallDelta | Finish]:
    if not item.output:
        return []
    done = Completion.model_validate_json(item.output)
    events: list[TextDelta | ToolCallDelta | Finish] = []
    if done.text:
        events.append(TextDelta(text=done.text))
    for i, c in enumerate(done.tool_calls):
        events.append(ToolCallDelta(index=i, id=c.id, name=c.name, arguments_delta=c.arguments))
    events.append(Finish(reason=done.finish_reason))
    return events


@router.post("/embeddings", operation_id="CreateEmbeddings", response_model=None)
async def embeddings(
    body: EmbeddingsIn, request: Request, principal: Invoker, service: Service, headers: CallHeaders
) -> Response:
    inputs = [body.input] if isinstance(body.input, str) else list(body.input)
    if not inputs:
        raise Problem(422, "input must not be empty.", field="body.input")
    call = Call(
        profile_id=body.model,
        project_id=headers.project_id,
        run_id=headers.run_id,
        attempt_id=headers.attempt_id,
        idempotency_key=headers.idempotency_key,
        operation=Operation.EMBED,
        payload={"input": inputs},
        request=inputs,
        data_classification=headers.data_classification,
    )
    running = await service.start(principal, call)
    vectors: list[list[float]] = []
    summary: InvocationSummary | None = None
    async for item in running.events:
        if isinstance(item, EmbeddingResult):
            vectors = [list(v) for v in item.vectors]
        elif isinstance(item, Replayed) and item.output:
            vectors = json.loads(item.output)["vectors"]
        elif isinstance(item, ReceiptReady):
            summary = item.summary
            break
    assert summary is not None
    if summary.outcome is not InvocationOutcome.COMPLETED:
        return _failure(request, summary, service.retry_after(principal, running))
    tokens = summary.input_tokens or 0
    return JSONResponse(
        {
            "object": "list",
            "data": [
                {
                    "object": "embedding",
                    "index": i,
                    "embedding": encode_vector(v, body.encoding_format),
                }
                for i, v in enumerate(vectors)
            ],
            "model": body.model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        },
        headers={RECEIPT: str(summary.invocation_id), DEPLOYMENT: summary.deployment_id or ""},
    )


@router.get("/models", operation_id="ListModels")
async def models(principal: Invoker, session: SessionDep) -> dict[str, Any]:
    rows = await ModelProfileRepository(session, principal.tenant_id).latest_active()
    return {
        "object": "list",
        "data": [
            {"id": r.profile_id, "object": "model", "created": 0, "owned_by": "model-router"}
            for r in rows
        ],
    }
