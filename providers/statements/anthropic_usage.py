"""Anthropic's Admin API messages usage report (admin key):

GET /v1/organizations/usage_report/messages?starting_at=<RFC 3339>&ending_at=<RFC 3339>
    &bucket_width=1h&group_by[]=model&group_by[]=api_key_id&group_by[]=service_tier
    &limit=<buckets>[&page=<next_page>]
  headers x-api-key, anthropic-version: 2023-06-01
→ {"data": [{"starting_at": …, "ending_at": …, "results": [{"uncached_input_tokens": …,
   "cache_creation": {"ephemeral_1h_input_tokens": …, "ephemeral_5m_input_tokens": …},
   "cache_read_input_tokens": …, "output_tokens": …, "server_tool_use": {…}, "model": …,
   "api_key_id": …, "workspace_id": …, "service_tier": …, "context_window": …}]}],
   "has_more": …, "next_page": …}

Receipts count every prompt token as input with the cache reads as the cached part and the
cache writes as their own part, so input is uncached + cache reads + cache writes (5-minute and
1-hour alike), cached is the cache reads and the writes are priced apart: folded into plain
input, a settled receipt's writes were priced below the bill. Batch-tier usage is left out: the
router never submits message batches.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import httpx

from domain.statements import StatementLine
from providers.secrets import Connection
from providers.statements.base import api_root, as_int, get_json
from providers.statements.openai_usage import BUCKET_LIMIT

ANTHROPIC_VERSION = "2023-06-01"
_MAX_PAGES = 1000


def _rfc3339(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


class AnthropicUsageSource:
    name = "anthropic-usage"
    provider = "anthropic"

    def __init__(
        self,
        http: httpx.AsyncClient,
        connection: Connection,
        key_refs: Mapping[str, str] | None = None,
    ) -> None:
        self._http = http
        self._connection = connection
        self._key_refs = dict(key_refs or {})
        self._url = api_root(connection.base_url, "https://api.anthropic.com")
        self._url += "/v1/organizations/usage_report/messages"

    async def fetch(self, start: datetime, end: datetime, bucket_width: str) -> list[StatementLine]:
        lines: list[StatementLine] = []
        page: str | None = None
        for _ in range(_MAX_PAGES):
            params: list[tuple[str, str | int]] = [
                ("starting_at", _rfc3339(start)),
                ("ending_at", _rfc3339(end)),
                ("bucket_width", bucket_width),
                ("group_by[]", "model"),
                ("group_by[]", "api_key_id"),
                ("group_by[]", "service_tier"),
                ("limit", BUCKET_LIMIT[bucket_width]),
            ]
            if page:
                params.append(("page", page))
            body = await get_json(
                self._http,
                self.name,
                self._url,
                params=params,
                headers={
                    "x-api-key": self._connection.api_key.get_secret_value(),
                    "anthropic-version": ANTHROPIC_VERSION,
                },
            )
            for bucket in body["data"]:
                lines.extend(self._lines(bucket, bucket_width, end))
            page = body.get("next_page") if body.get("has_more") else None
            if not page:
                break
        return lines

    def _lines(self, bucket: dict[str, Any], width: str, end: datetime) -> list[StatementLine]:
        start_at, end_at = _parse(bucket["starting_at"]), _parse(bucket["ending_at"])
        if end_at > end:
            return []
        out = []
        for result in bucket.get("results") or []:
            model, key_id = result.get("model"), result.get("api_key_id")
            tier = result.get("service_tier") or "-"
            if not model or tier == "batch":
                continue
            key: str | None = None
            if self._key_refs:
                key = self._key_refs.get(key_id or "")
                if key is None:
                    continue
            creation = result.get("cache_creation") or {}
            cache_read = as_int(result.get("cache_read_input_tokens"))
            written = as_int(creation.get("ephemeral_1h_input_tokens")) + as_int(
                creation.get("ephemeral_5m_input_tokens")
            )
            out.append(
                StatementLine(
                    statement_ref=(
                        f"{self.name}/{start_at:%Y-%m-%dT%H:%MZ}/{width}/{model}"
                        f"/{key_id or '-'}/{tier}"
                    ),
                    source=self.name,
                    provider=self.provider,
                    model=model,
                    key=key,
                    bucket_start=start_at,
                    bucket_end=end_at,
                    input_tokens=as_int(result.get("uncached_input_tokens")) + cache_read + written,
                    output_tokens=as_int(result.get("output_tokens")),
                    cached_input_tokens=cache_read,
                    cache_write_input_tokens=written,
                )
            )
        return out
