"""OpenAI-compatible surface: `model` is a profile id; the official SDK works unchanged.
Run, attempt, project and idempotency come as headers; the receipt id and the answering
deployment come back as headers (and, when streaming, in a final event)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response

from api.calls import Call
from api.deps import ApiKeyInvoker, SessionDep, require
from api.invocation_events import Running
from api.openai_errors import problem_with_error
from api.openai_shapes import (
    ChatCompletionIn,
    EmbeddingsIn,
    completion_body,
    encode_vector,
    to_chat_request,
    usage_body,
)
from api.openai_stream import ChatChunks
from api.problems import Problem
from api.surface import CallHeaders, Service
from api.wire import (
    answer_chat,
    failure_response,
    receipt_headers,
    receipt_view,
    result,
)
from core.security import Principal
from domain.access import Action
from domain.enums import InvocationOutcome, Scope
from domain.invocation import MAX_EMBED_INPUTS, InvocationSummary, Operation
from providers.types import Completion
from store.repositories import ModelProfileRepository

router = APIRouter(prefix="/v1", tags=["openai-compatible"])

Invoker = Annotated[Principal, Depends(require(Scope.MODELS_INVOKE, Action.INVOKE))]
# Errors under these prefixes keep problem+json and carry OpenAI's `error` member too.
ENVELOPES = [
    (prefix, problem_with_error) for prefix in ("/v1/chat/", "/v1/embeddings", "/v1/models")
]


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
    include_usage = bool(body.stream_options and body.stream_options.include_usage)

    def chunks(running: Running) -> ChatChunks:
        return ChatChunks(running.invocation_id, body.model, include_usage)

    async def whole(running: Running, done: Completion, summary: InvocationSummary) -> Response:
        usage = usage_body(summary)
        out = completion_body(running.invocation_id, body.model, done, usage)
        out["model_router"] = receipt_view(summary)
        return JSONResponse(out, headers=receipt_headers(summary))

    stream = chunks if body.stream else None
    return await answer_chat(request, service, principal, call, stream=stream, whole=whole)


@router.post("/embeddings", operation_id="CreateEmbeddings", response_model=None)
async def embeddings(
    body: EmbeddingsIn, request: Request, principal: Invoker, service: Service, headers: CallHeaders
) -> Response:
    inputs = [body.input] if isinstance(body.input, str) else list(body.input)
    if not inputs:
        raise Problem(422, "input must not be empty.", field="body.input")
    empty = next((i for i, text in enumerate(inputs) if not text), None)
    if empty is not None:
        # As OpenAI refuses it ("cannot be an empty string"), before anything is claimed: it
        # was claimed and sent, the key spent on OpenAI's 400, a self-hosted server's vector.
        field = "body.input" if isinstance(body.input, str) else f"body.input.{empty}"
        raise Problem(422, "input cannot be an empty string.", field=field)
    if len(inputs) > MAX_EMBED_INPUTS:
        # As /gateway/embed and OpenAI take: uncapped, one call held any number of texts.
        raise Problem(422, f"input holds at most {MAX_EMBED_INPUTS} texts.", field="body.input")
    call = Call(
        profile_id=body.model,
        project_id=headers.project_id,
        run_id=headers.run_id,
        attempt_id=headers.attempt_id,
        idempotency_key=headers.idempotency_key,
        operation=Operation.EMBED,
        # `dimensions` changes the answer, so it is the request's (and its key's) as the texts
        # are. It was accepted and dropped: full-width vectors for a 256-wide index.
        payload={"input": inputs, **({"dimensions": body.dimensions} if body.dimensions else {})},
        request=(inputs, body.dimensions),
        data_classification=headers.data_classification,
        budget_usd=headers.budget_usd,
    )
    running = await service.start(principal, call)
    found, summary = await result(running)
    if found is None or summary.outcome is not InvocationOutcome.COMPLETED:
        return failure_response(request, summary, service.retry_after(principal, running, summary))
    vectors: list[list[float]] = found["vectors"]
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
            "model_router": receipt_view(summary),
        },
        headers=receipt_headers(summary),
    )


# Both SDKs list models at this one path. The anthropic SDK sends an `anthropic-version`
# header and reads Anthropic's page of `ModelInfo`: it could not read OpenAI's. Its key may
# come as `x-api-key`, as Anthropic's own examples send it, taken as on the Messages surface.


def _model(profile_id: str, anthropic: bool) -> dict[str, Any]:
    if anthropic:
        # No creation time is kept for a profile: the epoch, as the OpenAI shape's 0.
        created = "1970-01-01T00:00:00Z"
        return {
            "type": "model",
            "id": profile_id,
            "display_name": profile_id,
            "created_at": created,
        }
    return {"id": profile_id, "object": "model", "created": 0, "owned_by": "model-router"}


def _anthropic(request: Request) -> bool:
    return "anthropic-version" in request.headers


@router.get("/models", operation_id="ListModels")
async def models(request: Request, principal: ApiKeyInvoker, session: SessionDep) -> dict[str, Any]:
    rows = await ModelProfileRepository(session, principal.tenant_id).latest_active()
    anthropic = _anthropic(request)
    data = [_model(r.profile_id, anthropic) for r in rows]
    if anthropic:
        first, last = (data[0]["id"], data[-1]["id"]) if data else (None, None)
        return {"data": data, "has_more": False, "first_id": first, "last_id": last}
    return {"object": "list", "data": data}


@router.get("/models/{model}", operation_id="RetrieveModel")
async def model(
    model: str, request: Request, principal: ApiKeyInvoker, session: SessionDep
) -> dict[str, Any]:
    """One profile as `/models` lists it (`client.models.retrieve`, which some clients ask
    before they use a model: it was a 404 for every profile)."""
    rows = await ModelProfileRepository(session, principal.tenant_id).latest_active()
    if not any(r.profile_id == model for r in rows):
        raise Problem(404, f"No active profile {model!r}.", field="model")
    return _model(model, _anthropic(request))
