"""One client span per provider call attempt, with the OpenTelemetry GenAI attributes and the
router's own ids (model.profile, model.deployment, receipt.id, policy.decision.id).

Only names, ids, counts and classes go on the span: never a message, an output, a tool
argument, or an error's text (a provider's error message may quote the prompt), which is why
exceptions are not recorded and a failure is described by its class alone."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from activities.invoke_outcomes import Outcome
from core.tracing import tracer
from domain.enums import InvocationOutcome
from domain.invocation import InvocationInput, Operation, Target

# GenAI semantic conventions name the operations; rerank has no name there, so it keeps ours.
_OPERATION = {Operation.CHAT: "chat", Operation.EMBED: "embeddings", Operation.RERANK: "rerank"}


@contextmanager
def provider_call(data: InvocationInput, target: Target, attempt: int) -> Iterator[Span]:
    operation = _OPERATION[data.operation]
    with tracer().start_as_current_span(
        f"{operation} {target.model}",
        kind=SpanKind.CLIENT,
        attributes={
            "gen_ai.operation.name": operation,
            "gen_ai.provider.name": target.provider,
            # The name before semantic conventions 1.37, still what many backends read.
            "gen_ai.system": target.provider,
            "gen_ai.request.model": target.model,
            "model.profile": data.profile_id,
            "model.deployment": target.deployment_id,
            "receipt.id": str(data.invocation_id),
            "policy.decision.id": str(data.policy_decision_id),
            "model_router.attempt": attempt,
        },
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except BaseException as exc:
            span.set_attribute("error.type", type(exc).__name__)
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            raise


def record(span: Span, result: Outcome) -> None:
    if not span.is_recording():
        return
    if result.response_model:
        span.set_attribute("gen_ai.response.model", result.response_model)
    if result.finish_reason:
        span.set_attribute("gen_ai.response.finish_reasons", [result.finish_reason])
    if result.input_tokens is not None:
        span.set_attribute("gen_ai.usage.input_tokens", result.input_tokens)
    if result.output_tokens is not None:
        span.set_attribute("gen_ai.usage.output_tokens", result.output_tokens)
    if result.provider_request_id:
        span.set_attribute("model_router.provider_request_id", result.provider_request_id)
    span.set_attribute("model_router.outcome", result.outcome.value)
    span.set_attribute("model_router.usage_status", result.usage.value)
    if result.outcome is not InvocationOutcome.COMPLETED:
        kind = result.error_kind or "error"
        span.set_attribute("error.type", kind)
        span.set_status(Status(StatusCode.ERROR, kind))
