"""Rerank over HTTP, in the Cohere/Jina request shape that self-hosted rerankers (vLLM, the
TEI-compatible servers, the local upstream) accept at `{base_url}/rerank`. No official SDK
covers these servers, so this is plain httpx, with a request on a kept connection the server
closed under it sent once more (providers/transport.resending)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import httpx

from providers.base import ProviderAdapter
from providers.errors import (
    UNREADABLE,
    ErrorKind,
    MalformedAnswer,
    ProviderError,
    error_field,
    kind_from_status,
    malformed_answer,
    retry_after_seconds,
    transport_error,
)
from providers.secrets import Connection
from providers.transport import resending
from providers.types import CallLimits, ProviderTimeouts, RerankItem, RerankResult
from providers.usage_figures import count


def _request_id(response: httpx.Response) -> str | None:
    return response.headers.get("x-request-id") or response.headers.get("request-id")


def _status_error(response: httpx.Response, provider: str) -> ProviderError:
    try:
        body: Any = response.json()
    except ValueError:
        body = None
    # Only message fields: FastAPI-style validation errors echo the input under "input".
    message = (
        error_field(body, "error", "message")
        or error_field(body, "message")
        or error_field(body, "detail")
    )
    code = error_field(body, "error", "code") or error_field(body, "error", "type")
    return ProviderError(
        kind_from_status(response.status_code, code, message),
        provider=provider,
        status_code=response.status_code,
        code=code,
        reason=message,
        retry_after=retry_after_seconds(response.headers),
        provider_request_id=_request_id(response),
    )


def _items(body: Any, documents: int) -> list[RerankItem]:
    """The results of a rerank answer, most relevant first; MalformedAnswer (or what reading a
    malformed body raises) when one names a document that was not sent or scores it with a
    value that is not a finite number."""
    rows = body.get("results") if isinstance(body, dict) else body
    if not isinstance(rows, list):
        raise MalformedAnswer("no results")
    items = []
    for row in rows:
        index, score = row["index"], float(row.get("relevance_score", row.get("score")))
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < documents:
            # Its number, never its value: a text `index` is the answer's words, and this
            # reason reaches the receipt's story and the workflow's history.
            named = index if isinstance(index, int) else f"of type {type(index).__name__}"
            raise MalformedAnswer(f"a result names document {named} of {documents}")
        if not math.isfinite(score):
            raise MalformedAnswer("a score that is not a finite number")
        items.append(RerankItem(index=index, relevance_score=score))
    return sorted(items, key=lambda item: (-item.relevance_score, item.index))


class RerankAdapter(ProviderAdapter):
    def __init__(
        self,
        *,
        model: str,
        connection: Connection,
        timeouts: ProviderTimeouts,
        provider: str = "rerank",
    ) -> None:
        if not connection.base_url:
            raise ProviderError(
                ErrorKind.INVALID_REQUEST,
                provider=provider,
                reason="a rerank server needs a base URL",
            )
        self.provider = provider
        self.model = model
        self._url = connection.base_url.rstrip("/") + "/rerank"
        self.timeouts, self.timeout_type = timeouts, httpx.Timeout
        self._client = resending(
            httpx.AsyncClient(
                timeout=timeouts.as_timeout(httpx.Timeout),
                # httpx's own limits, with idle connections kept as the SDK adapters keep theirs.
                limits=httpx.Limits(
                    max_connections=100,
                    max_keepalive_connections=20,
                    keepalive_expiry=timeouts.keepalive,
                ),
                headers={"authorization": f"Bearer {connection.api_key.get_secret_value()}"},
                follow_redirects=False,
            )
        )

    async def rerank(
        self,
        query: str,
        documents: Sequence[str],
        *,
        top_n: int | None = None,
        limits: CallLimits | None = None,
    ) -> RerankResult:
        body: dict[str, Any] = {"model": self.model, "query": query, "documents": list(documents)}
        if top_n is not None:
            body["top_n"] = top_n
        try:
            response = await self.first_byte(
                self._client.post(self._url, json=body, **self.call_timeout(limits)),
                limits,
            )
        except httpx.HTTPError as exc:
            raise (
                transport_error(exc, provider=self.provider)
                or ProviderError(ErrorKind.CONNECTION, provider=self.provider)
            ) from None
        if response.status_code >= 400:
            raise _status_error(response, self.provider)
        try:
            payload = response.json()
            # At most top_n, whatever the server sent: one that ignores top_n (TEI has none)
            # answered every document.
            items = _items(payload, len(documents))[:top_n]
        except UNREADABLE as exc:
            raise malformed_answer(self.provider, "rerank", exc, _request_id(response)) from None
        usage = payload.get("usage") if isinstance(payload, dict) else None
        meta = payload.get("meta") if isinstance(payload, dict) else None
        billed = meta.get("billed_units") if isinstance(meta, dict) else None
        return RerankResult(
            results=tuple(items),
            input_tokens=count(usage.get("total_tokens")) if isinstance(usage, dict) else None,
            search_units=count(billed.get("search_units")) if isinstance(billed, dict) else None,
            provider_request_id=_request_id(response),
        )

    async def aclose(self) -> None:
        await self._client.aclose()
