"""What every invoke surface takes in the same way (Chat Completions, Messages, Responses; the
gateway takes its own body): the invocation service as a dependency, the call headers (run,
attempt, project, key, data classification, budget) and the one chat `Call` built from them,
and the retry hint both SDKs read. What goes back out — headers, answers, streams, failures —
is `api/wire.py`."""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Annotated

from fastapi import Depends, Header

from api.calls import Call
from api.deps import RuntimeDep
from api.invocations import Invocations
from api.problems import Problem, field_refused
from core import metrics
from domain.invocation import Operation
from domain.policy import DataClassification
from providers.types import ChatRequest


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


IdempotencyKeyHeader = Annotated[
    str | None, Header(alias="Idempotency-Key", max_length=200, pattern=r"^[A-Za-z0-9._:/-]+$")
]
# The data classification a caller gives in a header; absent is told apart from Internal where a
# body may name it too (/gateway/*).
ClassificationHeader = Annotated[DataClassification | None, Header(alias="X-Data-Classification")]


def classification_of(
    in_body: DataClassification | None, in_header: DataClassification | None
) -> DataClassification:
    """A /gateway/* call's data classification: its body's `dataClassification` or the
    `X-Data-Classification` header every other surface reads (ignored there, a Confidential
    call was routed or planned as Internal), Internal with neither; both, and different, a 422."""
    if in_header is not None and in_body is not None and in_header is not in_body:
        raise field_refused(
            "header.X-Data-Classification",
            "differs from body.dataClassification",
            "The X-Data-Classification header and body.dataClassification differ.",
        )
    return in_body or in_header or DataClassification.INTERNAL


# An `async def` dependency: a class (its plain __init__) would run in the thread pool.
async def call_headers(
    run_id: Annotated[uuid.UUID | None, Header(alias="X-Run-Id")] = None,
    attempt_id: Annotated[uuid.UUID | None, Header(alias="X-Attempt-Id")] = None,
    project_id: Annotated[
        str, Header(alias="X-Project-Id", min_length=1, max_length=200)
    ] = "default",
    idempotency_key: IdempotencyKeyHeader = None,
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
