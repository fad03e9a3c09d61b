"""Anthropic's errors as the normalised ProviderError: an SDK status error, a transport failure,
and an `error` event inside an accepted stream, each by its `error_code` first, then its type,
then its status."""

from __future__ import annotations

from typing import Any

import anthropic

from providers.errors import (
    ErrorKind,
    ProviderError,
    aiohttp_failure,
    error_field,
    kind_from_status,
    mid_stream,
    retry_after_seconds,
    transport_error,
)

_ERROR_TYPES = {
    "rate_limit_error": ErrorKind.RATE_LIMIT,
    "overloaded_error": ErrorKind.OVERLOADED,
    "api_error": ErrorKind.SERVER,
    "timeout_error": ErrorKind.TIMEOUT,
    "authentication_error": ErrorKind.AUTH,
    "permission_error": ErrorKind.AUTH,
    "billing_error": ErrorKind.QUOTA,
    "not_found_error": ErrorKind.NOT_FOUND,
    "request_too_large": ErrorKind.INVALID_REQUEST,
}
# The cause an error's `error.details.error_code` names (the SDK's `APIStatusError.error_code`),
# ahead of its type: a spend limit comes as a 429 rate_limit_error, and as a rate limit it was
# retried on the same deployment, which no wait would let through, and never fell back; an
# organization Anthropic put on hold comes as a 400 invalid_request_error, which blamed the
# caller and stopped the call. The 402s (linked_organization_*) are `billing_error`s already.
_ERROR_CODES = {
    "enforced_spend_limit_reached": ErrorKind.QUOTA,
    "contract_spend_limit_reached": ErrorKind.QUOTA,
    "linked_organization_spend_limit_reached": ErrorKind.QUOTA,
    "linked_organization_billing_unavailable": ErrorKind.QUOTA,
    "organization_on_hold": ErrorKind.AUTH,
}


def _status_error(
    *,
    provider: str,
    status: int,
    error_type: str | None,
    error_code: str | None,
    message: str | None,
    headers: Any,
    request_id: str | None,
) -> ProviderError:
    # Errors inside a stream arrive with the stream's status, 200: the code, then the type,
    # decides.
    kind = _ERROR_CODES.get(error_code or "") or _ERROR_TYPES.get(error_type or "")
    if kind is None:
        kind = kind_from_status(status if status >= 300 else 500, error_type, message)
    return ProviderError(
        kind,
        provider=provider,
        status_code=status,
        code=error_code or error_type,
        reason=message,
        retry_after=retry_after_seconds(headers),
        provider_request_id=request_id,
    )


def map_error(exc: Exception, provider: str) -> ProviderError:
    mapped = aiohttp_failure(exc, provider=provider)
    if mapped is not None:
        return mapped
    if isinstance(exc, anthropic.APITimeoutError):
        return ProviderError(ErrorKind.TIMEOUT, provider=provider, reason="timed out")
    if isinstance(exc, anthropic.APIConnectionError):
        return ProviderError(ErrorKind.CONNECTION, provider=provider, reason="connection error")
    if isinstance(exc, anthropic.APIStatusError):
        return _status_error(
            provider=provider,
            status=exc.status_code,
            error_type=exc.type if isinstance(exc.type, str) else None,
            error_code=exc.error_code,
            message=exc.api_message,
            headers=exc.response.headers,
            request_id=exc.request_id,
        )
    mapped = transport_error(exc, provider=provider)
    if mapped is not None:
        return mapped
    return ProviderError(ErrorKind.SERVER, provider=provider, reason=type(exc).__name__)


def stream_error(
    event: dict[str, Any], headers: Any, provider: str, request_id: str | None
) -> ProviderError:
    """An `error` event inside an accepted stream, mapped as the SDK's status error for it
    would be (status 200, the error's type decides)."""
    error = event.get("error")
    error = error if isinstance(error, dict) else {}
    error_type, message = error.get("type"), error.get("message")
    return mid_stream(
        _status_error(
            provider=provider,
            status=200,
            error_type=error_type if isinstance(error_type, str) else None,
            error_code=error_field(error, "details", "error_code"),
            message=message if isinstance(message, str) else None,
            headers=headers,
            request_id=request_id,
        ),
        request_id,
    )
