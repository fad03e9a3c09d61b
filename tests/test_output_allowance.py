"""A profile's maxOutputTokens is a limit on every answer, through the official SDKs against
both protocols of the local upstream: a caller asking for more, or for nothing, is capped at
it (the answer cut, as by its own max_tokens), one asking for less keeps its own, and a budget
is judged on that cap, not on a default of 4,096 tokens."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest
from anthropic import AsyncAnthropic
from temporalio.client import Client

from providers.upstream import UpstreamServer
from tests.conftest import TokenFactory
from tests.helpers.surfaces import PROTOCOLS, Catalog, build_catalog

LIMIT = 3
# The upstream echoes the user's words after "Echo:", a token each: eight, so a cap of three
# cuts it.
SAID = "one two three four five six"


@pytest.fixture
async def capped(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
) -> Catalog:
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    return await build_catalog(http, auth, temporal_client, tenant, upstream, maxOutputTokens=LIMIT)


@pytest.fixture
async def chat(
    api_url: str, token_for: TokenFactory, tenant: str, capped: Catalog
) -> AsyncIterator[openai.AsyncOpenAI]:
    token = await token_for(tenant)
    async with openai.AsyncOpenAI(base_url=f"{api_url}/v1", api_key=token, max_retries=0) as c:
        yield c


def _asked(max_tokens: int | None) -> dict[str, Any]:
    return {} if max_tokens is None else {"max_tokens": max_tokens}


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("max_tokens", [None, 200])
async def test_an_answer_is_cut_at_the_profiles_limit(
    chat: openai.AsyncOpenAI, capped: Catalog, protocol: str, max_tokens: int | None
) -> None:
    # Without the limit, the OpenAI deployment was asked for no cap and the Anthropic one for
    # 4,096 tokens (or the caller's 200): the whole echo came back.
    answer = await chat.chat.completions.create(
        model=capped.profile(protocol),
        messages=[{"role": "user", "content": SAID}],
        **_asked(max_tokens),
    )
    assert answer.choices[0].message.content == "Echo: one"
    assert answer.choices[0].finish_reason == "length"
    assert answer.usage is not None and answer.usage.completion_tokens == LIMIT


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_caller_asking_for_less_keeps_its_own_cap(
    chat: openai.AsyncOpenAI, capped: Catalog, protocol: str
) -> None:
    answer = await chat.chat.completions.create(
        model=capped.profile(protocol),
        messages=[{"role": "user", "content": SAID}],
        max_tokens=2,
    )
    assert answer.choices[0].message.content == "Echo:"
    assert answer.usage is not None and answer.usage.completion_tokens == 2


async def test_messages_with_a_model_sized_max_tokens_is_capped(
    api_url: str, token_for: TokenFactory, tenant: str, capped: Catalog
) -> None:
    # Claude Code streams, asking 32,000 tokens of every model: capped, not refused.
    async with AsyncAnthropic(
        base_url=api_url, api_key=await token_for(tenant), max_retries=0
    ) as client:
        async with client.messages.stream(
            model=capped.profile("anthropic"),
            max_tokens=32_000,
            messages=[{"role": "user", "content": SAID}],
        ) as stream:
            message = await stream.get_final_message()
    assert message.stop_reason == "max_tokens"
    assert message.usage.output_tokens == LIMIT


@pytest.mark.parametrize("max_tokens", [None, 1_000_000])
async def test_a_budget_is_judged_on_the_cap(
    chat: openai.AsyncOpenAI, capped: Catalog, max_tokens: int | None
) -> None:
    # Output is priced at 2,000 USD a million tokens here: 4,096 tokens (the old default for a
    # caller asking nothing) or the caller's million are over 8 USD, the profile's three are
    # under a cent. The input estimate is under 0.1 USD.
    answer = await chat.chat.completions.create(
        model=capped.profile("openai"),
        messages=[{"role": "user", "content": SAID}],
        extra_headers={"X-Budget-Usd": "1", "Idempotency-Key": f"cap-{uuid.uuid4().hex}"},
        **_asked(max_tokens),
    )
    assert answer.usage is not None and answer.usage.completion_tokens == LIMIT
