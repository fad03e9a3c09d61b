"""The HTTP transport under the provider SDKs. The SDK still builds every request (auth, base
URL, headers) and maps every status error; only the client it sends them through changes.

aiohttp, the SDKs' own optional transport (`openai.DefaultAioHttpClient`,
`anthropic.DefaultAioHttpClient`), is the default: its C HTTP parser cost the adapters 38-50%
less CPU per streamed ~35-token answer than the default httpx2 client and 21-28% less per
embedding call, at concurrency 1 and 16 (bench/bench_provider_transport.py, 2026-12-01,
docs/benchmarks.md). httpx2 stays selectable per adapter, for that benchmark and the tests
that hold both transports to the same error kinds.

Both clients are built with the SDK's own defaults: at most 1000 connections, idle ones kept
5 s. aiohttp has no separate cap on idle connections (httpx2 keeps 100) and no write timeout
(requests are small; the connect, pool and read bounds apply as before). Its session is
opened on the first request and closed with the SDK client (`ProviderAdapter.aclose`).
"""

from __future__ import annotations

from typing import Literal

HttpTransport = Literal["aiohttp", "httpx2"]
DEFAULT_TRANSPORT: HttpTransport = "aiohttp"
