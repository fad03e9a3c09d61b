"""An invocation in a surface's wire format, for every surface (Chat Completions, Messages,
Responses, `/gateway/*`): the headers that name its receipt, the one answer folded from its
events, a stored answer told again as events, the stream relayed through a surface's writer,
and the failure a caller is told.

A surface brings only its shapes: a `StreamEvents` writer (`openai_stream.py`,
`anthropic_stream.py`, `responses_stream.py`, the gateway's) and its body builders. The token
path stays lean: per text delta `relay` does one type test and one call of the writer's `text`
(for Chat Completions the lean encoder of `api/sse.py` itself), and the events are the
adapters' own objects: nothing is built per chunk to carry them. Measured against the inline
loop Chat Completions had before (200k text deltas through an async generator, best of 5):
~420 ns a chunk both, -4 to +9 ns apart; calling the writer's `add` per chunk had cost +22 to
+43 ns. Testing what the writer gave, to notice output it holds back (HELD_KEEP_ALIVE_SECONDS),
costs +10 to +14 ns a chunk (the same loop, interleaved, best of 7: 239 → 249, 244 → 259)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from activities.invoke_hub import ReceiptReady
from api.budget import BUDGET_REASONS, denial
from api.caller_gone import CLIENT_CLOSED, CallerGone, unless_gone
from api.calls import Call
from api.invocation_events import InvocationEvent, Replayed, Running
from api.invocations import Invocations
from api.openai_errors import openai_names
from api.problems import problem_response
from core.security import Principal
from domain.close_reason import close_reason
from domain.enums import InvocationOutcome
from domain.failures import KEY_CLOSED, FailureClass, classify, error_class
from domain.invocation import InvocationSummary
from providers.completion_fold import CompletionBuilder
from providers.types import (
    Completion,
    EmbeddingResult,
    Finish,
    KeepAlive,
    RefusalDelta,
    RerankResult,
    TextDelta,
    ToolCallDelta,
)

RECEIPT, DEPLOYMENT = "X-Model-Router-Receipt-Id", "X-Model-Router-Deployment"
# Every event stream's (every surface's streams start here, in `answer_chat`): never stored, and
# never held by a proxy on the caller's side. nginx buffers a proxied response unless told
# otherwise, and held a stream's tokens until its buffer filled or the answer ended.
SSE_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
# Reported (the provider said), Estimated (our count) or Unknown, as on the receipt.
USAGE_STATUS = "X-Model-Router-Usage-Status"
# How long output a surface's writer holds back may keep a stream silent before a keep-alive
# goes out: a parallel tool call's fragments wait for the message's end on Messages and
# Responses, text after a tool call on Messages, while the provider goes on generating them and
# sends no keep-alive of its own (OpenAI's never do). Two parallel 30 kB file writes at some
# 200 B/s held a stream silent for about 150 s, past the 60 s after which nginx
# (`proxy_read_timeout`) and an AWS load balancer cut an idle connection, and the caller paid
# for the turn again.
HELD_KEEP_ALIVE_SECONDS = 15.0


def stream_headers(running: Running, first: InvocationEvent) -> dict[str, str]:
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


def receipt_view(summary: InvocationSummary) -> dict[str, Any]:
    """The `model_router` object a response carries beside the surface's own fields (the
    stream's final event and the whole body alike): which receipt, which deployment answered,
    and whether the usage is the provider's figure or our estimate."""
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


async def first_event(running: Running) -> InvocationEvent:
    """The first event: a receipt here means the call failed before any output (or a replay
    of one that did), which every surface answers as a failure, not a stream (but what a
    surface streams its own way: `answer_chat`'s `failed_stream`)."""
    return await anext(running.events)


def failed_early(first: InvocationEvent) -> InvocationSummary | None:
    """The receipt of a call that ended without output and not Completed, else None."""
    if isinstance(first, ReceiptReady) and first.summary.outcome is not InvocationOutcome.COMPLETED:
        return first.summary
    return None


async def collect(
    running: Running, first: InvocationEvent
) -> tuple[Completion | None, InvocationSummary]:
    """A chat invocation as one answer (live events folded, or the stored one) and its receipt."""
    builder = CompletionBuilder()
    item = first
    while True:
        if isinstance(item, ReceiptReady):
            completion = builder.build() if builder.finished else None
            return completion, item.summary
        if isinstance(item, Replayed):
            replayed = Completion.model_validate_json(item.output) if item.output else None
            summary = await _receipt(running)
            return replayed, summary if replayed is not None else without_output(summary)
        if isinstance(item, TextDelta | ToolCallDelta | Finish):
            builder.add(item)
        item = await anext(running.events)


async def result(running: Running) -> tuple[Any, InvocationSummary]:
    """An embed's or rerank's one result as JSON (live, or the stored one) and its receipt;
    None with the failure to answer with when there is none: the call failed, or a replay's
    stored result could not be read (`output_unavailable`, as for a chat answer; it was an
    empty list, or a 500, where an answer had been given)."""
    found: Any = None
    async for item in running.events:
        if isinstance(item, ReceiptReady):
            return found, item.summary if found is not None else without_output(item.summary)
        if isinstance(item, Replayed):
            found = json.loads(item.output) if item.output else None
        elif isinstance(item, EmbeddingResult | RerankResult):
            found = item.model_dump(mode="json")
    raise RuntimeError("the invocation ended without a receipt")


async def _receipt(running: Running) -> InvocationSummary:
    item = await anext(running.events)
    if not isinstance(item, ReceiptReady):
        raise RuntimeError("a replayed answer was not followed by its receipt")
    return item.summary


# A replay of a call that completed whose stored answer cannot be read: its tenant's retention
# removed it, the volume did not answer, or the process died between the receipt's close and
# the answer's file (written beside the answer, activities/invoke_close.py). Answered as a
# failure of that kind, never as an empty answer that looks whole: a streamed replay ended
# cleanly with no content, twice in bench/bench_faults.py's run at 05:41, 2026-12-05 (the API
# killed under load).
OUTPUT_UNAVAILABLE = "output_unavailable"


def without_output(summary: InvocationSummary) -> InvocationSummary:
    """A replay's receipt when its stored answer could not be read."""
    if summary.outcome is not InvocationOutcome.COMPLETED:
        return summary  # a failure replays as itself
    return summary.model_copy(update={"error_kind": OUTPUT_UNAVAILABLE})


def replay_events(item: Replayed) -> list[TextDelta | ToolCallDelta | Finish]:
    """A stored chat answer as the events that would have streamed it."""
    if not item.output:
        return []
    done = Completion.model_validate_json(item.output)
    text_event = RefusalDelta if done.refusal else TextDelta
    index = {id(c): i for i, c in enumerate(done.tool_calls)}
    # In the order the answer came in (where a cut fell is the last item's).
    events: list[TextDelta | ToolCallDelta | Finish] = [
        text_event(text=part)
        if isinstance(part, str)
        else ToolCallDelta(
            index=index[id(part)], id=part.id, name=part.name, arguments_delta=part.arguments
        )
        for part in done.in_order()
    ]
    events.append(
        Finish(
            reason=done.finish_reason,
            stop_sequence=done.stop_sequence,
            context_full=done.context_full,
        )
    )
    return events


class StreamEvents(Protocol):
    """A surface's wire events for one streamed invocation: `text` runs for nearly every chunk
    (a text delta's text: the token path, kept lean by each surface), `add` for any output
    event (a tool call's fragment, the finish, a replay's events), `keep_alive` for the
    provider's keep-alives once output has started (the surface's own: a long pause between
    two pieces of an answer is not silence to a proxy on the caller's side either), and while
    output the writer holds back (its `text` or `add` gave nothing) keeps the stream silent;
    `end` and `fail` run once, with the receipt."""

    def start(self) -> bytes: ...
    def text(self, text: str) -> bytes: ...
    def add(self, event: TextDelta | ToolCallDelta | Finish) -> bytes: ...
    def keep_alive(self) -> bytes: ...
    async def end(self, summary: InvocationSummary) -> bytes: ...
    async def fail(self, summary: InvocationSummary) -> bytes: ...


async def relay(
    running: Running, first: InvocationEvent, events: StreamEvents
) -> AsyncIterator[bytes]:
    """An invocation's events (live, or a replayed answer) in a surface's wire format, ending
    with its receipt: `end` when it completed, `fail` (never a clean stop) otherwise."""
    opening = events.start()
    if opening:  # an empty chunk is not sent: some servers would take it for the end
        yield opening
    text, add = events.text, events.add
    # Once the first item's chunk is sent, the call's task goes on relaying (PendingCall.hand_over).
    sent = running.pending.first_sent if running.pending is not None else None
    whole = True  # False for a replay whose stored answer could not be read
    held = 0.0  # when the writer began holding output back, while it does (else 0)
    item = first
    out: bytes | None
    while True:
        if type(item) is TextDelta:
            out = text(item.text)  # the token path: one test, one call, as before relay
        elif isinstance(item, ToolCallDelta | Finish | RefusalDelta):
            out = add(item)
        else:
            out = None
            if isinstance(item, Replayed):
                replayed = replay_events(item)
                whole = bool(replayed)
                for event in replayed:
                    yield add(event)
            elif isinstance(item, ReceiptReady):
                summary = item.summary if whole else without_output(item.summary)
                if summary.outcome is InvocationOutcome.COMPLETED and whole:
                    yield await events.end(summary)
                else:
                    yield await events.fail(summary)
                return
            elif type(item) is KeepAlive:
                yield events.keep_alive()
        if out:
            yield out
            held = 0.0
        elif out is not None:  # output the writer holds back: the caller hears nothing
            now = time.monotonic()
            if not held:
                held = now
            elif now - held >= HELD_KEEP_ALIVE_SECONDS:
                yield events.keep_alive()
                held = now
        if sent is not None:  # once: the token path checks a local from then on
            sent.set()
            sent = None
        item = await anext(running.events)


async def answer_chat(
    request: Request,
    service: Invocations,
    principal: Principal,
    call: Call,
    *,
    stream: Callable[[Running], StreamEvents] | None,
    whole: Callable[[Running, Completion, InvocationSummary], Awaitable[Response]],
    failed_stream: Callable[[InvocationSummary], Response | None] | None = None,
) -> Response:
    """A chat invocation answered on a surface, the same way on every surface: a failure before
    any output as the failure response; a stream (when the surface gives its writer) relayed
    through it; else the completed answer, in the surface's body (`whole`), or the failure.
    `failed_stream`: a surface's own answer to a stream's failure before output, where its
    clients act on one only as a stream's event (Responses: a context overflow); None, or
    when it gives None, the failure response."""
    running = await service.start(principal, call)
    if stream is None:
        # Without the caller's key nobody can come back for the answer: stopped when it leaves.
        answer = _folded(running)
        try:
            completion, summary = await (
                answer if call.idempotency_key else unless_gone(request, answer)
            )
        except CallerGone:
            return Response(status_code=CLIENT_CLOSED)
        if summary.outcome is not InvocationOutcome.COMPLETED or completion is None:
            retry_after = service.retry_after(principal, running, summary)
            return failure_response(request, summary, retry_after)
        return await whole(running, completion, summary)
    first = await first_event(running)
    early = failed_early(first)
    told = failed_stream(early) if early is not None and failed_stream is not None else None
    if told is not None:
        return told
    if early is not None:
        return failure_response(request, early, service.retry_after(principal, running, early))
    return StreamingResponse(
        relay(running, first, stream(running)),
        media_type="text/event-stream",
        # The deployment is named only once the output says who answered; the stream's
        # final `model_router` object names it in any case.
        headers={**stream_headers(running, first), **SSE_HEADERS},
    )


async def _folded(running: Running) -> tuple[Completion | None, InvocationSummary]:
    """The whole answer and its receipt, or no answer and the failure before any output."""
    first = await first_event(running)
    early = failed_early(first)
    if early is not None:
        return None, early
    return await collect(running, first)


# One mapping for every surface (domain.failures): the caller's fault is a 400; a transient
# failure — a candidate busy, down, timed out, a dropped connection or a stream cut before
# output — is a 503 with Retry-After, whatever broke, since the caller's only question is whether
# and when to come back; a permanent one on the provider's side (auth, quota, a model gone) is a
# 502 without Retry-After. A surface whose SDK tells transient failures apart by status gives
# each kind its own in its envelope (OpenAI's 429 for a rate limit, Anthropic's 529 for an
# overload), which the response then takes (api/problems.problem_response).
_STATUS = {FailureClass.CALLER: 400, FailureClass.TRANSIENT: 503, FailureClass.PERMANENT: 502}


def failure_response(
    request: Request, summary: InvocationSummary, retry_after: int | None
) -> JSONResponse:
    """A call that did not complete, as the surface's error (its envelope, by path prefix).
    `retry_after` None: a replay of the key's failure, which says so (see below)."""
    kind = summary.error_kind or "provider_error"
    if summary.outcome is InvocationOutcome.DENIED:
        # Only a budget writes a denial's receipt: its key replays the 402 it was answered
        # (it replayed as a 502, "the model call failed (denied)", to a runtime that then
        # reported a provider failure).
        reason = kind if kind in BUDGET_REASONS else None
        raise denial(
            summary.invocation_id, "Denied by the call's budget; its key replays it.", reason
        )
    headers = {RECEIPT: str(summary.invocation_id), DEPLOYMENT: summary.deployment_id or ""}
    if kind in KEY_CLOSED:  # closed before its answer was whole: never the provider's failure
        return _spent(request, summary, kind, headers)
    failure = classify(kind)
    status = _STATUS[failure]
    detail, message = f"The model call failed ({kind}).", f"model call failed: {kind}"
    if summary.error_reason:
        message = f"{message}: {summary.error_reason}"
    if failure is FailureClass.TRANSIENT and retry_after is None:
        # The same answer as the first time, but not its advice: waiting and sending this key
        # again replays this failure for good, and the SDKs retry a 503 by default. A runtime
        # keying each step stably obeyed the Retry-After and never called the provider again.
        headers["x-should-retry"] = "false"
        detail = f"{detail} This Idempotency-Key replays it: retry with a new key."
        message = f"{message} (replayed: retry with a new Idempotency-Key)"
    elif failure is FailureClass.TRANSIENT:
        headers["Retry-After"] = str(retry_after)
    error_type, code = openai_names(kind)
    return problem_response(
        request,
        status,
        detail,
        headers=headers,
        error={"message": message, "type": error_type, "code": code},
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
        f"The invocation with this key was closed before its answer was whole ({reason}); its "
        "usage stays Unknown until reconciled. Retry with a new Idempotency-Key.",
        type_="https://model-router.dev/problems/invocation-closed",
        # The SDKs retry 409s by default; retrying this key can only replay this answer.
        headers={**headers, "x-should-retry": "false"},
        error={"message": f"invocation closed: {reason}", "type": reason, "code": reason},
        receiptId=receipt,
        closeReason=reason,
        errorClass="permanent",
    )
