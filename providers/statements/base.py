"""What every statement source shares: its interface, its errors, and a GET that classifies
failures the way the provider adapters do."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

import httpx

from domain.statements import StatementLine
from providers.errors import (
    ErrorKind,
    clean_reason,
    error_field,
    kind_from_status,
    retry_after_seconds,
)


class StatementSourceError(Exception):
    """A statement source failed. `transient` says whether asking again later may work; the
    message never carries a credential (reasons are cleaned like adapter errors)."""

    def __init__(
        self,
        source: str,
        kind: ErrorKind,
        *,
        status_code: int | None = None,
        reason: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        self.source = source
        self.kind = kind
        self.status_code = status_code
        self.reason = clean_reason(reason)
        self.retry_after = retry_after
        status = f", status {status_code}" if status_code is not None else ""
        detail = f": {self.reason}" if self.reason else ""
        super().__init__(f"{source}: {kind.value}{status}{detail}")

    @property
    def transient(self) -> bool:
        return self.kind.transient


class StatementSource(Protocol):
    name: str
    provider: str

    async def fetch(self, start: datetime, end: datetime, bucket_width: str) -> list[StatementLine]:
        """Lines for every complete bucket in [start, end), all pages."""
        ...


def api_root(base_url: str | None, default: str) -> str:
    """Scheme and host of the API (a trailing /v1 is dropped: paths here are absolute)."""
    url = (base_url or default).rstrip("/")
    parts = urlsplit(url)
    path = parts.path[:-3] if parts.path.endswith("/v1") else parts.path
    return urlunsplit(parts._replace(path=path)).rstrip("/")


async def get_json(
    http: httpx.AsyncClient,
    source: str,
    url: str,
    *,
    params: Sequence[tuple[str, str | int]],
    headers: dict[str, str],
) -> dict[str, Any]:
    try:
        response = await http.get(url, params=list(params), headers=headers)
    except httpx.TimeoutException:
        raise StatementSourceError(source, ErrorKind.TIMEOUT, reason="timed out") from None
    except httpx.TransportError as exc:
        raise StatementSourceError(
            source, ErrorKind.CONNECTION, reason=type(exc).__name__
        ) from None
    if response.status_code >= 400:
        try:
            body: Any = response.json()
        except ValueError:
            body = None
        message = error_field(body, "error", "message") or error_field(body, "message")
        code = error_field(body, "error", "code") or error_field(body, "error", "type")
        raise StatementSourceError(
            source,
            kind_from_status(response.status_code, code, message),
            status_code=response.status_code,
            reason=message,
            retry_after=retry_after_seconds(response.headers),
        )
    try:
        data = response.json()
    except ValueError:
        raise StatementSourceError(source, ErrorKind.SERVER, reason="not JSON") from None
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise StatementSourceError(source, ErrorKind.SERVER, reason="no data array")
    return data


def as_int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and value >= 0 else 0
