"""The model gateway for runtimes that pass run, attempt and profile explicitly: Invoke (SSE
ending with a receipt event, or JSON with the receipt), Embed and Rerank."""

from __future__ import annotations

import json
import uuid
from decimal import Decimal
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from api.calls import Call
from api.deps import RuntimeDep, require
from api.invocation_events import Running
from api.problems import field_refused
from api.receipt_views import call_receipt
from api.runtime import Runtime
from api.sse import KEEP_ALIVE_COMMENT
from api.surface import (
    BufferedHeader,
    ClassificationHeader,
    IdempotencyKeyHeader,
    Service,
    classification_of,
)
from api.wire import (
    answer_chat,
    failure_response,
    receipt_headers,
    result,
)
from core.security import Principal
from domain.access import Action
from domain.close_reason import close_reason
from domain.enums import InvocationOutcome, Scope
from domain.failures import error_class
from domain.invocation import MAX_EMBED_INPUTS, Disposition, InvocationSummary, Operation
from domain.policy import DataClassification
from domain.text import StoredName
from providers.types import ChatRequest, Completion, Finish, RerankResult, TextDelta, ToolCallDelta
from store.repositories import InvocationReceiptRepository

router = APIRouter(prefix="/gateway", tags=["gateway"])

Invoker = Annotated[Principal, Depends(require(Scope.MODELS_INVOKE, Action.INVOKE))]


class _Scope(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    profile_id: StoredName = Field(alias="profileId", min_length=1, max_length=200)
    run_id: uuid.UUID | None = Field(default=None, alias="runId")
    attempt_id: uuid.UUID | None = Field(default=None, alias="attemptId")
    project_id: StoredName = Field(
        default="default", alias="projectId", min_length=1, max_length=200
    )
    idempotency_key: str | None = Field(
        default=None, alias="idempotencyKey", max_length=200, pattern=r"^[A-Za-z0-9._:/-]+$"
    )
    # None: not given in the body (the header's then, else Internal).
    data_classification: DataClassification | None = Field(default=None, alias="dataClassification")
    budget_usd: Decimal | None = Field(default=None, alias="budgetUsd", ge=0)

    def call(
        self,
        operation: Operation,
        payload: dict[str, Any],
        request: Any,
        key_header: str | None,
        class_header: DataClassification | None = None,
        **extra: Any,
    ) -> Call:
        """The call, keyed by `idempotencyKey` or the `Idempotency-Key` header (the /v1/
        surfaces' way, which runtimes send everywhere). The header was ignored here: each retry
        a new call, a second provider call and charge. Both, and different, is a 422. The data
        classification likewise, `dataClassification` or `X-Data-Classification`: the header
        was ignored, a Confidential call routed as Internal, where the tenant's policy may
        refuse its deployment for Confidential data."""
        if key_header and self.idempotency_key and key_header != self.idempotency_key:
            raise field_refused(
                "header.Idempotency-Key",
                "differs from body.idempotencyKey",
                "The Idempotency-Key header and body.idempotencyKey name different keys.",
            )
        return Call(
            profile_id=self.profile_id,
            project_id=self.project_id,
            run_id=self.run_id,
            attempt_id=self.attempt_id,
            idempotency_key=self.idempotency_key or key_header,
            operation=operation,
            payload=payload,
            request=request,
            data_classification=classification_of(self.data_classification, class_header),
            budget_usd=self.budget_usd,
            profile_field="body.profileId",
            **extra,
        )


class InvokeBody(_Scope):
    request: ChatRequest
    stream: bool = False


class EmbedBody(_Scope):
    # No empty input: OpenAI refuses one (after the call was claimed, its key spent), and a
    # self-hosted server answered a vector for nothing.
    inputs: list[Annotated[str, Field(min_length=1)]] = Field(
        min_length=1, max_length=MAX_EMBED_INPUTS
    )
    # The vectors' width, as `/v1/embeddings` takes it: it changes the answer, so it is the
    # request's (and its key's).
    dimensions: int | None = Field(default=None, ge=1)


class RerankBody(_Scope):
    query: str = Field(min_length=1)
    documents: list[str] = Field(min_length=1, max_length=1000)
    top_n: int | None = Field(default=None, alias="topN", ge=1)


async def _receipt(runtime: Runtime, tenant_id: str, summary: InvocationSummary) -> dict[str, Any]:
    """The final receipt, in the shape `/factory/runs/{runId}/model-receipts` lists it. It is
    durable before the summary arrives, so it is read back: one query, on these routes only."""
    async with runtime.sessions() as session:
        row = await InvocationReceiptRepository(session, tenant_id).get(summary.invocation_id)
    if row is None:  # not possible once ReceiptReady arrived; never answer without one
        raise RuntimeError("the invocation ended without a stored receipt")
    return call_receipt(row, summary).model_dump(mode="json")


@router.post("/invoke", operation_id="Invoke", response_model=None)
async def invoke(
    body: InvokeBody,
    request: Request,
    principal: Invoker,
    service: Service,
    runtime: RuntimeDep,
    buffered: BufferedHeader = None,
    key: IdempotencyKeyHeader = None,
    classification: ClassificationHeader = None,
) -> Response:
    chat = body.request
    call = body.call(
        Operation.CHAT,
        chat.model_dump(mode="json"),
        chat,
        key,
        classification,
        needs_tools=bool(chat.tools),
        needs_structured_output=chat.response_format is not None
        and chat.response_format.type != "text",
        max_output_tokens=chat.max_tokens,
        buffered=not body.stream,
        buffer_stream=buffered,
    )

    def events(running: Running) -> _Events:
        return _Events(runtime, principal.tenant_id)

    async def whole(running: Running, done: Completion, summary: InvocationSummary) -> Response:
        return JSONResponse(
            {
                "output": done.model_dump(mode="json", exclude=_PROVIDERS_OWN | {"usage"}),
                "receipt": await _receipt(runtime, principal.tenant_id, summary),
            },
            # The deployment that answered, which a fallback may have changed.
            headers=receipt_headers(summary),
        )

    stream = events if body.stream else None
    return await answer_chat(request, service, principal, call, stream=stream, whole=whole)


# What the provider says of itself: callers name profiles, never provider models, and the
# receipt is where the answering deployment is named (spec, ModelProfile; DESIGN §1). The
# answer and the stream's finish carried the provider's model name and request id.
# Nor what the gateway keeps for its own replays (where text fell among the calls, whether it
# ended the answer, why a cut came).
_PROVIDERS_OWN = {
    "response_model",
    "provider_request_id",
    "response_id",
    "text_at_calls",
    "ends_in_text",
    "context_full",
}


def _sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


class _Events:
    """The gateway's stream: each normalised event under its own name, then the stored
    receipt as `receipt` (or `error` when the call did not complete)."""

    def __init__(self, runtime: Runtime, tenant_id: str) -> None:
        self._runtime, self._tenant_id = runtime, tenant_id

    def start(self) -> bytes:
        return b""

    def text(self, text: str) -> bytes:
        return _sse("text_delta", {"type": "text_delta", "text": text})  # TextDelta's dump

    def add(self, event: TextDelta | ToolCallDelta | Finish) -> bytes:
        return _sse(event.type, event.model_dump(mode="json", exclude=_PROVIDERS_OWN))

    def keep_alive(self) -> bytes:
        return KEEP_ALIVE_COMMENT  # a comment: no event name beyond the spec's

    async def end(self, summary: InvocationSummary) -> bytes:
        return _sse("receipt", await _receipt(self._runtime, self._tenant_id, summary))

    async def fail(self, summary: InvocationSummary) -> bytes:
        if summary.disposition is Disposition.NOT_CLAIMED:
            # Its workflow could not be started after output began: no receipt was kept.
            return _sse(
                "error",
                {
                    "invocationId": str(summary.invocation_id),
                    "outcome": summary.outcome,
                    "errorKind": summary.error_kind,
                    "errorClass": error_class(summary.error_kind),
                    "receiptKept": False,
                },
            )
        # The receipt, with what every surface's stream error carries (README: a stream's
        # error event names the close reason and the failure's class): it had neither.
        receipt = await _receipt(self._runtime, self._tenant_id, summary)
        reason = summary.close_reason or close_reason(summary.outcome, summary.error_kind).value
        return _sse(
            "error",
            {**receipt, "closeReason": reason, "errorClass": error_class(summary.error_kind)},
        )


@router.post("/embed", operation_id="Embed", response_model=None)
async def embed(
    body: EmbedBody,
    request: Request,
    principal: Invoker,
    service: Service,
    runtime: RuntimeDep,
    key: IdempotencyKeyHeader = None,
    classification: ClassificationHeader = None,
) -> Response:
    running = await service.start(
        principal,
        body.call(
            Operation.EMBED,
            {"input": body.inputs, **({"dimensions": body.dimensions} if body.dimensions else {})},
            (list(body.inputs), body.dimensions),
            key,
            classification,
        ),
    )
    found, summary = await result(running)
    if found is None or summary.outcome is not InvocationOutcome.COMPLETED:
        return failure_response(request, summary, service.retry_after(principal, running, summary))
    receipt = await _receipt(runtime, principal.tenant_id, summary)
    return JSONResponse(
        {"vectors": found["vectors"], "receipt": receipt}, headers=receipt_headers(summary)
    )


@router.post("/rerank", operation_id="Rerank", response_model=None)
async def rerank(
    body: RerankBody,
    request: Request,
    principal: Invoker,
    service: Service,
    runtime: RuntimeDep,
    key: IdempotencyKeyHeader = None,
    classification: ClassificationHeader = None,
) -> Response:
    payload = {"query": body.query, "documents": body.documents, "topN": body.top_n}
    running = await service.start(
        principal,
        body.call(
            Operation.RERANK,
            payload,
            (body.query, list(body.documents), body.top_n),
            key,
            classification,
        ),
    )
    found, summary = await result(running)
    if found is None or summary.outcome is not InvocationOutcome.COMPLETED:
        return failure_response(request, summary, service.retry_after(principal, running, summary))
    results = RerankResult.model_validate(found).results
    return JSONResponse(
        {
            "results": [r.model_dump() for r in results],
            "receipt": await _receipt(runtime, principal.tenant_id, summary),
        },
        headers=receipt_headers(summary),
    )
