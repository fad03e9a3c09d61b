"""The chat request flow both wire protocols share: count, authenticate, apply faults, ask the
responder, apply the request's constraints, deliver (streamed or not) and note the ledger."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

from starlette.requests import Request
from starlette.responses import Response

from providers.upstream.answer import Answer, build_answer, new_id, prompt_prefixes
from providers.upstream.faults import Endpoint, Fault, FaultKind
from providers.upstream.problems import Api, context_length_error, fault_response, refusal
from providers.upstream.responders import respond
from providers.upstream.state import RequestRecord, UpstreamState
from providers.upstream.streaming import DelayedResponse, KeepAlivePause, SimStream
from providers.upstream.turn import ChatTurn, Figure

log = logging.getLogger("providers.upstream")


class BadRequest(Exception):
    """The request is malformed; the message names the field, never its value."""


@dataclass(frozen=True)
class StreamPlan:
    frames: Sequence[bytes]
    terminator: bytes
    content_start: int


@dataclass(frozen=True)
class Codec:
    api: Api
    endpoint: Endpoint
    request_id_header: str
    tool_id_prefix: str
    parse: Callable[[dict[str, object]], ChatTurn]
    render: Callable[[Answer, ChatTurn, bool], dict[str, object]]
    # (answer, turn, with usage, parallel tool calls interleaved where the protocol allows it)
    stream: Callable[[Answer, ChatTurn, bool, bool], StreamPlan]
    error: Callable[[int, str, str, dict[str, str]], Response]
    api_key: Callable[[Request], str | None]
    caches: Callable[[ChatTurn], bool]
    reports_cache_writes: bool


async def read_body(request: Request) -> dict[str, object]:
    try:
        body = json.loads(await request.body())
    except ValueError:
        raise BadRequest("the body is not valid JSON") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    return body


def chat_endpoint(codec: Codec) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        state: UpstreamState = request.app.state.upstream
        request_id = new_id("req_")
        headers = {codec.request_id_header: request_id, "x-upstream-simulator": "model-router"}
        try:
            body = await read_body(request)
        except BadRequest as exc:
            state.stats.record("", codec.endpoint)  # a request all the same
            return codec.error(400, str(exc), request_id, headers)
        model = body.get("model")
        model = model if isinstance(model, str) else ""
        state.stats.record(model, codec.endpoint)
        # Now that the model is known, in its own id format (`request_id_prefix`).
        request_id = headers[codec.request_id_header] = new_id(
            state.settings_for(model).request_id_prefix
        )

        def finish(response: Response, answer: Answer | None = None) -> Response:
            usage = answer.usage if answer else None
            state.record(
                RequestRecord(
                    model=model,
                    endpoint=codec.endpoint,
                    status=response.status_code,
                    request_id=request_id,
                    response_id=answer.response_id if answer else None,
                    input_tokens=_count(usage.input_tokens) if usage else None,
                    output_tokens=_count(usage.output_tokens) if usage else None,
                    cached_input_tokens=usage.cached_input_tokens if usage else None,
                )
            )
            return response

        if not state.key_accepted(codec.api_key(request)):
            return finish(codec.error(401, "invalid api key", request_id, headers))
        gate, shapes = state.faults.take(model, codec.endpoint)
        if gate is not None:
            resp = fault_response(
                gate, codec.api, headers=headers, request_id=request_id, shutdown=state.shutdown
            )
            return finish(resp)
        try:
            if not model:
                raise BadRequest("model is required")
            turn = codec.parse(body)
        except BadRequest as exc:
            return finish(codec.error(400, str(exc), request_id, headers))
        except (KeyError, TypeError, ValueError, AttributeError):
            message = "the request does not match the API's schema"
            return finish(codec.error(400, message, request_id, headers))
        settings = state.settings_for(model)
        refused = refusal(
            codec.api, list(settings.refuses), body, headers=headers, request_id=request_id
        )
        if refused is not None:
            return finish(refused)
        prefixes = prompt_prefixes(turn)
        used = prefixes[-1][1]
        overflow = _overflow(codec.api, used, turn.max_tokens, settings.context_window)
        if overflow is not None:
            resp = context_length_error(
                codec.api,
                used=used,
                window=overflow,
                headers=headers,
                request_id=request_id,
                max_tokens=turn.max_tokens if used <= overflow else None,
            )
            return finish(resp)
        cached = written = 0
        if codec.caches(turn):
            cached = state.prompt_cache(model, prefixes)
            if codec.reports_cache_writes:
                # What this request adds to the cache: its history beyond what was cached.
                written = max(0, prefixes[-2][1] - cached)
        try:
            reply = await respond(state.responder_for(model), turn)
        except Exception as exc:
            # The type only: a responder's message could quote the prompt.
            log.warning("responder for a model failed: %s", type(exc).__name__)
            return finish(codec.error(500, "the model failed", request_id, headers))
        answer = build_answer(
            reply,
            turn,
            input_tokens=used,
            cached_input_tokens=cached,
            cache_write_input_tokens=written,
            tool_id_prefix=codec.tool_id_prefix,
        )
        return finish(_deliver(codec, state, turn, answer, shapes, headers), answer)

    return endpoint


def _overflow(api: Api, used: int, max_tokens: int | None, window: int | None) -> int | None:
    """The model's window, when the request does not fit it: the prompt alone, or (Anthropic)
    the prompt with the `max_tokens` it asks for on top, which Anthropic refuses before
    generating ("input length and `max_tokens` exceed context limit")."""
    if window is None:
        return None
    if used > window or (api == "anthropic" and used + (max_tokens or 0) > window):
        return window
    return None


GARBLED = b"data: {not json\n\n"
ANTHROPIC_STREAM_ERROR = {
    "type": "error",
    "error": {"type": "overloaded_error", "message": "Overloaded"},
}
OPENAI_STREAM_ERROR = {
    "error": {
        "message": "The server had an error while processing your request.",
        "type": "server_error",
        "code": None,
    }
}


def _stream_error(fault: Fault, named: bool) -> bytes:
    """The protocol's in-stream error event, with the fault's `message` and `code` where it
    gives them (OpenAI's `error.code`; Anthropic's `error.details.error_code`)."""
    usual = ANTHROPIC_STREAM_ERROR if named else OPENAI_STREAM_ERROR
    error = dict(cast("dict[str, object]", usual["error"]))
    if fault.message is not None:
        error["message"] = fault.message
    if fault.code is not None:
        if named:
            error["details"] = {"error_code": fault.code}
        else:
            error["code"] = fault.code
    return sse({**usual, "error": error}, "error" if named else None)


def _deliver(
    codec: Codec,
    state: UpstreamState,
    turn: ChatTurn,
    answer: Answer,
    shapes: list[Fault],
    headers: dict[str, str],
) -> Response:
    """The answer as the response, shaped by the faults in force (late, cut, stalled…)."""
    kinds = {f.kind: f for f in shapes}
    if FaultKind.NO_TOOL_CALL_IDS in kinds:
        answer = replace(answer, tool_calls=[replace(c, id="") for c in answer.tool_calls])
    with_usage = FaultKind.NO_USAGE not in kinds
    slow = kinds.get(FaultKind.SLOW_FIRST_TOKEN)
    if not turn.stream:
        body = codec.render(answer, turn, with_usage)
        if FaultKind.MALFORMED_ANSWER in kinds and "choices" in body:
            # Chat Completions' content as a list of parts, as Mistral's Magistral answers:
            # the SDK takes it unvalidated, so only the adapter's reading can notice.
            choices = cast("list[dict[str, dict[str, object]]]", body["choices"])
            message = choices[0]["message"]
            message["content"] = [{"type": "text", "text": message["content"] or ""}]
        response: Response = _json(body, headers)
        if slow is not None:
            response = DelayedResponse(response, slow.delay, state.shutdown, state.released)
        return response
    plan = codec.stream(answer, turn, with_usage, FaultKind.INTERLEAVED_TOOL_CALLS in kinds)
    frames = list(plan.frames)
    if FaultKind.MISSING_TERMINATOR not in kinds:
        frames.append(plan.terminator)
    cut, stall = kinds.get(FaultKind.STREAM_CUT), kinds.get(FaultKind.STREAM_STALL)
    garbled = kinds.get(FaultKind.MALFORMED_CHUNK)
    content_start = plan.content_start
    # Anthropic names its events, OpenAI does not.
    named = bool(frames) and frames[0].startswith(b"event:")
    if FaultKind.REPEATED_TOOL_CALL_HEADS in kinds and not named:
        frames = _reshape_calls(frames, _repeat_head)
    if FaultKind.SHARED_TOOL_CALL_INDEX in kinds and not named:
        frames = _reshape_calls(frames, _index_zero)
    failed = kinds.get(FaultKind.STREAM_ERROR)
    if failed is not None:
        del frames[failed.after_chunks :]
        frames.append(_stream_error(failed, named))
    if garbled is not None:
        # A frame whose data is not JSON, where the next event should be: the stream goes on
        # after it, as a buggy proxy's would, so only the parser can notice.
        at = min(garbled.after_chunks, len(frames))
        # Named like a content event where the protocol names its events (Anthropic), so the
        # client parses it rather than skipping an unknown event.
        frames.insert(at, (b"event: content_block_delta\n" if named else b"") + GARBLED)
        content_start += at <= content_start
    stall_after = stall.after_chunks if stall else None
    alive = kinds.get(FaultKind.KEEP_ALIVE)
    endless = kinds.get(FaultKind.ENDLESS_LINE)
    if endless is not None:
        del frames[endless.after_chunks :]
        pieces, rest = divmod(endless.size, _PIECE)
        frames += [b"data: ", *[b"x" * _PIECE] * pieces, b"x" * rest]
        stall_after = len(frames)
        frames.append(b"")  # never sent: the stall comes first
    return SimStream(
        frames,
        headers=headers,
        shutdown=state.shutdown,
        release=state.released,
        content_start=content_start,
        first_delay=slow.delay if slow else 0.0,
        chunk_delay=state.settings_for(turn.model).chunk_delay,
        cut_after=cut.after_chunks if cut else None,
        cut_gracefully=bool(cut and cut.graceful),
        stall_after=stall_after,
        keep_alive=(
            KeepAlivePause(
                after=alive.after_chunks,
                seconds=alive.delay,
                every=alive.interval,
                frame=sse({"type": "ping"}, "ping") if named else b": keep-alive\n\n",
            )
            if alive
            else None
        ),
    )


# An endless line is sent in pieces of this many bytes.
_PIECE = 64 * 2**10


def _json(body: dict[str, object], headers: dict[str, str]) -> Response:
    content = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    return Response(content, 200, headers=headers, media_type="application/json")


def _reshape_calls(
    frames: list[bytes], reshape: Callable[[dict[str, Any], dict[object, dict[str, Any]]], None]
) -> list[bytes]:
    """Chat Completions frames with each tool-call fragment reshaped in place; `reshape` gets
    the fragment and the heads (id, type, name) seen so far by index."""
    heads: dict[object, dict[str, Any]] = {}
    out = []
    for frame in frames:
        if not frame.startswith(b"data: {"):
            out.append(frame)
            continue
        body = json.loads(frame[len(b"data: ") :])
        for choice in body.get("choices") or ():
            for call in (choice.get("delta") or {}).get("tool_calls") or ():
                reshape(call, heads)
        out.append(sse(body))
    return out


def _repeat_head(call: dict[str, Any], heads: dict[object, dict[str, Any]]) -> None:
    """Its head on every fragment of a call, and its index one more."""
    head = heads.setdefault(call["index"], {})
    if "id" in call:
        head.update(id=call["id"], type="function", name=call["function"]["name"])
    call.update({k: v for k, v in head.items() if k != "name"})
    call["function"]["name"] = head.get("name", "")
    call["index"] += 1


def _index_zero(call: dict[str, Any], _heads: dict[object, dict[str, Any]]) -> None:
    call["index"] = 0


def sse(data: object, event: str | None = None) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    prefix = f"event: {event}\n" if event else ""
    return f"{prefix}data: {payload}\n\n".encode()


def _count(figure: Figure) -> int | None:
    """A figure the ledger lists: a broken meter's fraction or string is no count."""
    return figure if isinstance(figure, int) else None
