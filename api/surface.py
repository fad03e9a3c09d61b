"""What every invoke surface shares (Chat Completions, Messages, Responses, the gateway): the
invocation service, the call headers, the receipt headers, folding an invocation's events into
one answer, replaying a stored answer as events, and the failure a caller is told."""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Annotated, Any

from fastapi import Depends, Header, Request
from fastapi.responses import JSONResponse

from activities.invoke_hub import ReceiptReady
from api.deps import RuntimeDep
from api.invocations import Invocations, Replayed, Running
from api.problems import Problem, problem_response
from domain.invocation import InvocationSummary
from domain.policy import DataClassification
from providers.errors import ErrorKind
from providers.types import Completion, CompletionBuilder, Finish, TextDelta, ToolCallDelta

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


def failure_response(
    request: Request, summary: InvocationSummary, retry_after: int
) -> JSONResponse:
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


async def first_event(running: Running) -> Any:
    return await anext(running.events)


async def collect(running: Running, first: Any) -> tuple[Completion | None, InvocationSummary]:
    """The whole answer (live or replayed) and the receipt's summary."""
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


def replay_events(item: Replayed) -> list[TextDelta | ToolCallDelta | Finish]:
    """A stored answer as the events a live call would have streamed."""
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


def no_retry(status: int, problem: dict[str, Any]) -> dict[str, str]:
    """Both SDKs retry 409 (as a lock timeout) and every 5xx unless told otherwise: a reused
    Idempotency-Key or a permanent failure will not change on a retry."""
    if status == 409 or problem.get("errorClass") == "permanent":
        return {"x-should-retry": "false"}
    return {}
