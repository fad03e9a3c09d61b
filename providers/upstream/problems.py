"""Error responses in each provider's real JSON shape, and the injected gate faults."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Literal

from starlette.responses import JSONResponse, Response

from providers.upstream.faults import Fault, FaultKind, Flaw
from providers.upstream.streaming import HangResponse, HangUpResponse

Api = Literal["openai", "anthropic"]

# (status, openai type, openai code, openai message, anthropic type, anthropic message)
_FAULTS: dict[FaultKind, tuple[int, str, str | None, str, str, str]] = {
    FaultKind.RATE_LIMIT: (
        429,
        "requests",
        "rate_limit_exceeded",
        "Rate limit reached for requests per min (RPM). Please try again later.",
        "rate_limit_error",
        "Number of requests has exceeded your per-minute rate limit.",
    ),
    FaultKind.SERVER_ERROR: (
        500,
        "server_error",
        None,
        "The server had an error while processing your request. Sorry about that!",
        "api_error",
        "Internal server error",
    ),
    FaultKind.UNAVAILABLE: (
        503,
        "server_error",
        None,
        "Service Unavailable.",
        "api_error",
        "Service unavailable",
    ),
    FaultKind.OVERLOADED: (
        503,
        "server_error",
        None,
        "The engine is currently overloaded, please try again later.",
        "overloaded_error",
        "Overloaded",
    ),
    FaultKind.CONTENT_POLICY: (
        400,
        "invalid_request_error",
        "content_policy_violation",
        "Your request was rejected as a result of our safety system. Your prompt may contain "
        "text that is not allowed by our safety system.",
        "invalid_request_error",
        "Output blocked by content filtering policy",
    ),
    FaultKind.AUTH: (
        401,
        "invalid_request_error",
        "invalid_api_key",
        "Incorrect API key provided.",
        "authentication_error",
        "invalid x-api-key",
    ),
    # Anthropic's is a 400 (`_ANTHROPIC_STATUS`).
    FaultKind.QUOTA: (
        429,
        "insufficient_quota",
        "insufficient_quota",
        "You exceeded your current quota, please check your plan and billing details.",
        "invalid_request_error",
        "Your credit balance is too low to access the Anthropic API. Please go to Plans & "
        "Billing to upgrade or purchase credits.",
    ),
    FaultKind.INVALID_REQUEST: (
        400,
        "invalid_request_error",
        None,
        "Invalid request.",
        "invalid_request_error",
        "Invalid request.",
    ),
}
# Where Anthropic answers a fault with another status than OpenAI.
_ANTHROPIC_STATUS = {FaultKind.OVERLOADED: 529, FaultKind.QUOTA: 400}


class _EscapedJSON(JSONResponse):
    """JSON with every non-ASCII character escaped, as many servers write it: so a message may
    hold half a surrogate pair, sent as its escape (Starlette's own rendering cannot encode it)."""

    def render(self, content: object) -> bytes:
        return json.dumps(content, separators=(",", ":")).encode()


# What a proxy in front of a provider sends when the provider behind it failed.
_HTML_ERROR = "<html><body>502 Bad Gateway</body></html>"


def malformed(payload: dict[str, Any], flaw: Flaw | None, headers: dict[str, str]) -> Response:
    """An answer's body, or under a malformed_answer fault one no client can take: an HTML page
    (`unreadable`), or the payload (already flawed by the endpoint) with NaN written as the bare
    token Python's json writes and JSON does not allow."""
    if flaw is None:
        return JSONResponse(payload, headers=headers)
    body = _HTML_ERROR if flaw == "unreadable" else json.dumps(payload)
    return Response(body, media_type="application/json", headers=headers)


def openai_error(
    status: int,
    message: str,
    *,
    type_: str = "invalid_request_error",
    code: str | int | None = None,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body = {"error": {"message": message, "type": type_, "param": param, "code": code}}
    return _EscapedJSON(body, status, headers=headers)


def anthropic_error(
    status: int,
    message: str,
    *,
    type_: str = "invalid_request_error",
    request_id: str | None = None,
    headers: dict[str, str] | None = None,
    error_code: str | int | None = None,
) -> JSONResponse:
    error = anthropic_error_object(type_, message, error_code)
    body = {"type": "error", "error": error, "request_id": request_id}
    return _EscapedJSON(body, status, headers=headers)


def anthropic_error_object(
    type_: str, message: str, error_code: str | int | None = None
) -> dict[str, object]:
    """An error's `error` object; with a code, the `details` naming the cause, as Anthropic
    sends for a spend limit or an organization on hold."""
    error: dict[str, object] = {"type": type_, "message": message}
    if error_code is not None:
        error["details"] = {"error_code": error_code}
    return error


def context_length_error(
    api: Api,
    *,
    used: int,
    window: int,
    headers: dict[str, str],
    request_id: str,
    message: str | None = None,
    max_tokens: int | None = None,
) -> JSONResponse:
    """The provider's refusal of a prompt of `used` tokens that the model's `window` cannot
    hold; with `max_tokens`, Anthropic's of a prompt that fits but not with that on top."""
    if api == "anthropic":
        if message is None and max_tokens is not None:
            message = (
                f"input length and `max_tokens` exceed context limit: {used} + {max_tokens} > "
                f"{window}, decrease input length or `max_tokens` and try again"
            )
        message = message or f"prompt is too long: {used} tokens > {window} maximum"
        return anthropic_error(400, message, request_id=request_id, headers=headers)
    message = message or (
        f"This model's maximum context length is {window} tokens. However, your messages "
        f"resulted in {used} tokens. Please reduce the length of the messages."
    )
    return openai_error(
        400, message, code="context_length_exceeded", param="messages", headers=headers
    )


def refusal(
    api: Api,
    refuses: list[str],
    body: dict[str, object],
    *,
    headers: dict[str, str],
    request_id: str,
) -> Response | None:
    """A chat request refused as the model's server refuses it (`ModelSettings.refuses`), or
    None."""

    def refused(
        status: int, openai: str, anthropic: str, param: str, code: str | None = None
    ) -> Response:
        if api == "anthropic":
            type_ = "not_found_error" if status == 404 else "invalid_request_error"
            return anthropic_error(
                status, anthropic, type_=type_, request_id=request_id, headers=headers
            )
        return openai_error(status, openai, code=code, param=param, headers=headers)

    if "chat" in refuses:
        return refused(
            404,
            "This is not a chat model and thus not supported in the v1/chat/completions "
            "endpoint. Did you mean to use v1/completions?",
            f"model: {body.get('model')}",
            "model",
        )
    if "temperature" in refuses and body.get("temperature") is not None:
        return refused(
            400,
            f"Unsupported value: 'temperature' does not support {body['temperature']} with "
            "this model. Only the default (1) value is supported.",
            "temperature is deprecated for this model.",
            "temperature",
            "unsupported_value",
        )
    fmt = body.get("output_config" if api == "anthropic" else "response_format")
    if "response_format" in refuses and isinstance(fmt, dict) and fmt.get("type") != "text":
        return refused(
            400,
            f"Invalid parameter: 'response_format' of type '{fmt.get('type')}' is not "
            "supported with this model.",
            "output_config.format: structured outputs are not supported for this model.",
            "response_format",
        )
    return None


def fault_response(
    fault: Fault, api: Api, *, headers: dict[str, str], request_id: str, shutdown: asyncio.Event
) -> Response:
    if fault.kind is FaultKind.HANG:
        return HangResponse(shutdown)
    if fault.kind is FaultKind.HANG_UP:
        return HangUpResponse(fault.delay, shutdown)
    if fault.kind is FaultKind.REDIRECT:
        return Response(status_code=307, headers={**headers, "location": fault.location or "/"})
    if fault.kind is FaultKind.CONTEXT_LENGTH:
        return context_length_error(
            api,
            used=200_001,
            window=200_000,
            headers=headers,
            request_id=request_id,
            message=fault.message,
        )
    status, o_type, o_code, o_message, a_type, a_message = _FAULTS[fault.kind]
    if fault.message is not None:
        o_message = a_message = fault.message
    headers = dict(headers)
    if fault.kind is FaultKind.RATE_LIMIT and fault.retry_after_text is not None:
        headers["retry-after"] = fault.retry_after_text
    elif fault.kind is FaultKind.RATE_LIMIT and fault.retry_after is not None:
        headers["retry-after"] = f"{fault.retry_after:g}"
    if api == "anthropic":
        return anthropic_error(
            _ANTHROPIC_STATUS.get(fault.kind, status),
            a_message,
            type_=a_type,
            request_id=request_id,
            headers=headers,
            error_code=fault.code,
        )
    code = fault.code if fault.code is not None else o_code
    return openai_error(status, o_message, type_=o_type, code=code, headers=headers)
