"""The adapter interface the router calls. One adapter instance serves one deployment
(provider, model, connection) and may be shared by concurrent calls."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any, TypeVar

from providers.errors import ErrorKind, ProviderError
from providers.types import (
    CallLimits,
    ChatRequest,
    Completion,
    EmbeddingResult,
    ProviderTimeouts,
    RerankResult,
    StreamEvent,
)

T = TypeVar("T")


class ProviderAdapter(ABC):
    """Every method returns normalised results or raises ProviderError: SDK and transport
    exceptions never escape. Operations a provider does not offer raise ProviderError with
    kind `unsupported`."""

    provider: str
    model: str
    # What `call_timeout` builds on: the adapter's own timeouts and its HTTP client's class.
    timeouts: ProviderTimeouts
    timeout_type: Callable[..., Any]

    async def stream(
        self, request: ChatRequest, *, limits: CallLimits | None = None
    ) -> AsyncGenerator[StreamEvent, None]:
        """Accepted (with the provider's request id) once its headers are in, then text and
        tool-call deltas as they arrive, then a UsageEvent when the provider
        reported usage, then Finish. A stream that ends without the provider's stop signal
        raises ProviderError(stream_incomplete). Closing the iterator early closes the HTTP
        response."""
        raise self.unsupported("chat")
        yield  # pragma: no cover - makes this an async generator like the overrides

    async def complete(
        self, request: ChatRequest, *, limits: CallLimits | None = None
    ) -> Completion:
        """The same answer without streaming, normalised through the same events."""
        raise self.unsupported("chat")

    async def count_tokens(self, request: ChatRequest, *, limits: CallLimits | None = None) -> int:
        """The provider's own count of the request's input tokens, where it offers one."""
        raise self.unsupported("token counting")

    async def embed(
        self,
        inputs: Sequence[str],
        *,
        dimensions: int | None = None,
        limits: CallLimits | None = None,
    ) -> EmbeddingResult:
        raise self.unsupported("embeddings")

    async def rerank(
        self,
        query: str,
        documents: Sequence[str],
        *,
        top_n: int | None = None,
        limits: CallLimits | None = None,
    ) -> RerankResult:
        raise self.unsupported("rerank")

    @abstractmethod
    async def aclose(self) -> None:
        """Releases the HTTP connection pool."""

    def call_timeout(self, limits: CallLimits | None) -> dict[str, Any]:
        """The `timeout` argument of one call whose limits change the connect bound; nothing
        otherwise (the client's own timeouts apply)."""
        if limits is None or limits.connect is None:
            return {}
        return {"timeout": self.timeouts.merged(limits).as_timeout(self.timeout_type)}

    async def first_byte(self, response: Awaitable[T], limits: CallLimits | None) -> T:
        """Awaits the provider's response (its status and headers) within the call's first-byte
        bound: a provider that accepts the connection and stays silent fails here, long before
        the first-token or attempt timeouts would notice."""
        if limits is None or limits.first_byte is None:
            return await response
        try:
            # A timeout scope, not wait_for: on Python 3.11 wait_for runs the awaitable in a
            # task of its own, one more task per provider call.
            async with asyncio.timeout(limits.first_byte):
                return await response
        except TimeoutError:
            raise ProviderError(
                ErrorKind.TIMEOUT, provider=self.provider, reason="first byte timeout"
            ) from None

    def unsupported(self, what: str) -> ProviderError:
        return ProviderError(
            ErrorKind.UNSUPPORTED,
            provider=self.provider,
            reason=f"{what} is not offered by this adapter",
        )

    async def __aenter__(self) -> ProviderAdapter:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
