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
from api import sse
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
from core import metrics
from core.security import Principal
from domain.access import Action
from domain.close_reason import GATEWAY_CLOSES, close_reason
from domain.enums import InvocationOutcome, Scope
from domain.failures import FailureClass, classify, error_class
from domain.invocation import InvocationSummary, Operation
from domain.policy import DataClassification
from providers.types import (
    ChatRequest,
    Completion,
    EmbeddingResult,
    Finish,
    TextDelta,
    ToolCallDelta,
)
from store.repositories import ModelProfileRepository

router = APIRouter(prefix="/v1", tags=["openai-compatible"])

Invoker = Annotated[Principal, Depends(require(Scope.MODELS_INVOKE, Action.INVOKE))]
RECEIPT, DEPLOYMENT = "X-Model-Router-Receipt-Id", "X-Model-Router-Deployment"
# Reported (the provider said), Estimated (our count) or Unknown, as on the receipt.
USAGE_STATUS = "X-Model-Router-Usage-Status"


def stream_headers(running: Running, first: Any) -> dict[str, str]:
    """A stream's headers go out before its receipt: they name the deployment only once its
    output (or a replayed receipt) says who answered, never the plan's guess."""
    headers = {RECEIPT: str(running.invocation_id)}
    deployment = running.answering(first)
    if deployment:
        headers[DEPLOYMENT] = deployment
    return headers


def receipt_headers(summary: InvocationSummary) -> dict[str, str]:
    """A whole response's headers: the receipt's own words."""
    headers = {RECEIPT: str(summary.invocation_id), DEPLOYMENT: summary.deployment_id or ""}
    if summary.usage_status is not None:
        headers[USAGE_STATUS] = summary.usage_status.value
    return headers


def router_extension(summary: InvocationSummary) -> dict[str, Any]:
    """The `model_router` object a response carries beside the OpenAI fields (the stream's final
    event and the non-stream body alike): which receipt, which deployment answered, and whether
    `usage` is the provider's figure or our estimate."""
    return {
        "receiptId": str(summary.invocation_id),
        "deploymentId": summary.deployment_id,
        "outcome": summary.outcome,
        "usageStatus": summary.usage_status,
        "fallbackUsed": summary.fallback_used,
        # Which provider attempt answered (retries and fallbacks count), and whether its answer
        # was held until complete: a held stream was never spliced from two attempts.
        "providerAttempt": summary.provider_attempt,
        "buffered": summary.buffered,
    }


async def _service(runtime: RuntimeDep) -> Invocations:
    if runtime.invoke.service is None:
        # Not connected yet (the process started while Temporal was away).
        metrics.refusals.add(1, {"reason": "temporal-unreachable"})
        raise Problem(
            503,
            "Temporal is not reachable; try again shortly.",
            type_="https://model-router.dev/problems/temporal-unavailable",
            headers={"Retry-After": "5"},
            reason="temporal-unreachable",
        )
    return runtime.invoke.service


Service = Annotated[Invocations, Depends(_service)]


class Headers:
    """The invocation headers of a call."""

    def __init__(
        self,
        run_id: uuid.UUID | None,
        attempt_id: uuid.UUID | None,
        project_id: str,
        idempotency_key: str | None,
        data_classification: DataClassification,
        budget_usd: Decimal | None,
        buffered: bool | None = None,
    ) -> None:
        self.budget_usd, self.buffered = budget_usd, buffered
        self.run_id, self.attempt_id, self.project_id = run_id, attempt_id, project_id
        self.idempotency_key, self.data_classification = idempotency_key, data_classification

    def chat_call(self, profile_id: str, chat: ChatRequest, *, buffered: bool) -> Call:
        """A chat invocation of `profile_id` with these headers, whatever surface it came in
        through: what it needs of the route (tools, structured output) is read off the request;
        `buffered` when the caller takes one whole answer (not a stream); a stream is held or
        not as X-Model-Router-Buffered says, else as the profile's latencyClass does."""
        return Call(
            profile_id=profile_id,
            project_id=self.project_id,
            run_id=self.run_id,
            attempt_id=self.attempt_id,
            idempotency_key=self.idempotency_key,
            operation=Operation.CHAT,
            payload=chat.model_dump(mode="json"),
            request=chat,
            data_classification=self.data_classification,
            budget_usd=self.budget_usd,
            max_output_tokens=chat.max_tokens,
            buffered=buffered,
            buffer_stream=self.buffered,
            needs_tools=bool(chat.tools),
            needs_structured_output=chat.response_format is not None
            and chat.response_format.type != "text",
        )


# A stream held until its answer is complete (true) or passed through as it comes (false),
# whatever the profile's latencyClass says (domain.buffering); absent: the profile decides.
BufferedHeader = Annotated[bool | None, Header(alias="X-Model-Router-Buffered")]


# An `async def` dependency: a class (its plain __init__) would run in the thread pool.
async def call_headers(
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
    buffered: BufferedHeader = None,
) -> Headers:
    return Headers(
        run_id, attempt_id, project_id, idempotency_key, data_classification, budget_usd, buffered
    )


CallHeaders = Annotated[Headers, Depends(call_headers)]


# One mapping for every surface (domain.failures): the caller's fault is a 400; a transient
# failure — a candidate busy, down, timed out, a dropped connection or a stream cut before
# output — is a 503 with Retry-After, whatever broke, since the caller's only question is whether
# and when to come back; a permanent one on the provider's side (auth, quota, a model gone) is a
# 502 without Retry-After.
_STATUS = {FailureClass.CALLER: 400, FailureClass.TRANSIENT: 503, FailureClass.PERMANENT: 502}
# Our side closed the call without an answer (the process holding it died, the sweeper found it
# open past its budget, the gateway failed after the claim): the key is spent and the provider
# may have billed, so the same key can only replay this. Never reported as a provider error.
_SPENT = frozenset(c.value for c in GATEWAY_CLOSES)


def _failure(request: Request, summary: InvocationSummary, retry_after: int) -> JSONResponse:
    kind = summary.error_kind or "provider_error"
    headers = {RECEIPT: str(summary.invocation_id), DEPLOYMENT: summary.deployment_id or ""}
    if kind in _SPENT:
        return _spent(request, summary, kind, headers)
    failure = classify(kind)
    status = _STATUS[failure]
    if failure is FailureClass.TRANSIENT:
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
        closeReason=summary.close_reason or close_reason(summary.outcome, summary.error_kind),
        errorClass=error_class(kind),
    )


def _spent(
    request: Request, summary: InvocationSummary, reason: str, headers: dict[str, str]
) -> JSONResponse:
    receipt = str(summary.invocation_id)
    return problem_response(
        request,
        409,
        f"The invocation with this key was closed without an answer ({reason}); its usage "
        "stays Unknown until reconciled. Retry with a new Idempotency-Key.",
        type_="https://model-router.dev/problems/invocation-closed",
        # The SDKs retry 409s by default; retrying this key can only replay this answer.
        headers={**headers, "x-should-retry": "false"},
        error={"message": f"invocation closed: {reason}", "type": reason, "code": reason},
        receiptId=receipt,
        closeReason=reason,
        errorClass="permanent",
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
    call = headers.chat_call(body.model, chat, buffered=not body.stream)
    running = await service.start(principal, call)
    first = await _first(running)
    if isinstance(first, ReceiptReady) and first.summary.outcome is not InvocationOutcome.COMPLETED:
        return _failure(request, first.summary, service.retry_after(principal, running))
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return StreamingResponse(
            _sse(running, first, body.model, include_usage),
            media_type="text/event-stream",
            headers={**stream_headers(running, first), "Cache-Control": "no-store"},
        )
    completion, summary = await _collect(running, first)
    if summary.outcome is not InvocationOutcome.COMPLETED or completion is None:
        return _failure(request, summary, service.retry_after(principal, running))
    usage = usage_body(summary.input_tokens, summary.output_tokens)
    out = completion_body(running.invocation_id, body.model, completion, usage)
    out["model_router"] = router_extension(summary)
    return JSONResponse(out, headers=receipt_headers(summary))


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


_sse_line = sse.line


async def _sse(
    running: Running, first: Any, profile: str, include_usage: bool
) -> AsyncIterator[bytes]:
    inv = running.invocation_id
    texts = sse.TextChunks(inv, profile)
    yield _sse_line(chunk(inv, profile, {"role": "assistant", "content": ""}))
    item: Any = first
    while True:
        if type(item) is TextDelta:
            yield texts.text(item.text)  # the common case, encoded lean
        elif isinstance(item, Replayed):
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
                reason = summary.close_reason or close_reason(summary.outcome, summary.error_kind)
                yield _sse_line(
                    {
                        "error": {
                            "message": f"model call failed: {summary.error_kind}",
                            "type": summary.error_kind,
                            "code": summary.outcome,
                            "errorClass": error_class(summary.error_kind),
                            "receiptId": str(inv),
                            "deploymentId": summary.deployment_id,
                            "closeReason": reason,
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
            yield _sse_line(chunk(inv, profile, model_router=router_extension(summary)))
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
            "model_router": router_extension(summary),
        },
        headers=receipt_headers(summary),
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
