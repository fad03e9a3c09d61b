"""The SDK adapters under each HTTP transport they can be given, for tests about connections:
the SDKs' aiohttp transport (the default) and their httpx2 one, kept selectable for the
transport benchmark (providers/transport.py)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from providers.anthropic_adapter import AnthropicAdapter
from providers.base import ProviderAdapter
from providers.openai_adapter import OpenAIAdapter
from providers.secrets import UpstreamSecretBroker
from providers.types import ProviderTimeouts

# `@pytest.fixture(params=SDK_TRANSPORTS)`: (adapter class, transport), named.
SDK_TRANSPORTS = [
    pytest.param((OpenAIAdapter, "aiohttp"), id="openai"),
    pytest.param((AnthropicAdapter, "aiohttp"), id="anthropic"),
    pytest.param((OpenAIAdapter, "httpx2"), id="openai-httpx2"),
    pytest.param((AnthropicAdapter, "httpx2"), id="anthropic-httpx2"),
]
TIMEOUTS = ProviderTimeouts(connect=2, read=10)


@asynccontextmanager
async def sdk_adapter(
    param: Any, port: int, model_prefix: str, timeouts: ProviderTimeouts = TIMEOUTS
) -> AsyncIterator[ProviderAdapter]:
    """The adapter a `SDK_TRANSPORTS` parameter names, to the simulator (or a proxy in front of
    it) on 127.0.0.1:`port`, for a model of its own."""
    kind, transport = param
    connection = await UpstreamSecretBroker().resolve(f"upstream:127.0.0.1:{port}")
    model = f"{model_prefix}-{uuid.uuid4().hex[:8]}"
    built = kind(model=model, connection=connection, timeouts=timeouts, transport=transport)
    async with built:
        yield built
