"""OpenAI's organization Usage API, completions and embeddings usage (admin key):

GET /v1/organization/usage/completions?start_time=<unix s>&end_time=<unix s>&bucket_width=1h
    &group_by=model&group_by=api_key_id&batch=false&limit=<buckets>[&page=<next_page>]
→ {"object": "page", "data": [{"object": "bucket", "start_time": …, "end_time": …,
   "results": [{"object": "organization.usage.completions.result", "input_tokens": …,
   "output_tokens": …, "input_cached_tokens": …, "num_model_requests": …, "model": …,
   "api_key_id": …, "project_id": …, …}]}], "has_more": …, "next_page": …}

GET /v1/organization/usage/embeddings (the same, without `batch`) → results of
"organization.usage.embeddings.result" with `input_tokens` and `num_model_requests`: the
embeddings the router's Embed calls made. Read only from the completions endpoint, an embedding
receipt never matched a line, and stayed Unknown (counted in usage_unknown) until its lookback
passed.

`input_tokens` includes the cached ones, as receipts count them. Batch jobs are excluded
(`batch=false`): the router never submits any, so they would only inflate the buckets.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

import httpx

from domain.statements import StatementLine
from providers.secrets import Connection
from providers.statements.base import api_root, as_int, get_json

BUCKET_LIMIT = {"1m": 1440, "1h": 168, "1d": 31}
_MAX_PAGES = 1000


class OpenAIUsageSource:
    name = "openai-usage"
    provider = "openai"

    def __init__(
        self,
        http: httpx.AsyncClient,
        connection: Connection,
        key_refs: Mapping[str, str] | None = None,
    ) -> None:
        self._http = http
        self._connection = connection
        self._key_refs = dict(key_refs or {})
        self._root = api_root(connection.base_url, "https://api.openai.com")
        self._root += "/v1/organization/usage/"

    async def fetch(self, start: datetime, end: datetime, bucket_width: str) -> list[StatementLine]:
        lines = await self._fetch("completions", start, end, bucket_width)
        return lines + await self._fetch("embeddings", start, end, bucket_width)

    async def _fetch(
        self, kind: str, start: datetime, end: datetime, bucket_width: str
    ) -> list[StatementLine]:
        lines: list[StatementLine] = []
        page: str | None = None
        for _ in range(_MAX_PAGES):
            params: list[tuple[str, str | int]] = [
                ("start_time", int(start.timestamp())),
                ("end_time", int(end.timestamp())),
                ("bucket_width", bucket_width),
                ("group_by", "model"),
                ("group_by", "api_key_id"),
                ("limit", BUCKET_LIMIT[bucket_width]),
            ]
            if kind == "completions":
                params.append(("batch", "false"))
            if page:
                params.append(("page", page))
            body = await get_json(
                self._http,
                self.name,
                self._root + kind,
                params=params,
                headers={"Authorization": f"Bearer {self._connection.api_key.get_secret_value()}"},
            )
            for bucket in body["data"]:
                lines.extend(self._lines(bucket, bucket_width, end, kind))
            page = body.get("next_page") if body.get("has_more") else None
            if not page:
                break
        return lines

    def _lines(self, bucket: dict, width: str, end: datetime, kind: str) -> list[StatementLine]:
        start_at = datetime.fromtimestamp(int(bucket["start_time"]), UTC)
        end_at = datetime.fromtimestamp(int(bucket["end_time"]), UTC)
        if end_at > end:
            return []  # still filling up; its tokens are not final
        out = []
        for result in bucket.get("results") or []:
            model, key_id = result.get("model"), result.get("api_key_id")
            if not model:
                continue
            key: str | None = None
            if self._key_refs:
                key = self._key_refs.get(key_id or "")
                if key is None:
                    continue  # a key the router does not use: someone else's usage
            out.append(
                StatementLine(
                    # Completions keep the reference they always had (a settled line is known
                    # by it); an embeddings line's names its endpoint.
                    statement_ref=(
                        f"{self.name}{'' if kind == 'completions' else '/' + kind}"
                        f"/{start_at:%Y-%m-%dT%H:%MZ}/{width}/{model}/{key_id or '-'}"
                    ),
                    source=self.name,
                    provider=self.provider,
                    model=model,
                    key=key,
                    bucket_start=start_at,
                    bucket_end=end_at,
                    input_tokens=as_int(result.get("input_tokens")),
                    output_tokens=as_int(result.get("output_tokens")),
                    cached_input_tokens=min(
                        as_int(result.get("input_cached_tokens")),
                        as_int(result.get("input_tokens")),
                    ),
                )
            )
        return out
