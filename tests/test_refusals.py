"""A model's refusal (OpenAI's `refusal` field: a structured-output request it declines, content
null) was dropped: the caller got an empty answer ended `stop`. It is now answered as its words,
ended as a content filter ends one, on every surface: Chat Completions `content_filter`,
Messages `refusal` (the stop reason Anthropic's own refusals carry), Responses `incomplete`
(`content_filter`); streamed and whole alike."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from anthropic import AsyncAnthropic
from openai import AsyncOpenAI
from temporalio.client import Client

from providers.upstream import UpstreamServer
from providers.upstream.turn import ChatTurn, Reply
from tests.conftest import TokenFactory
from tests.helpers.catalog import simulated_profile

PROFILE, MODEL = "refuses", "refuses-sim"
WORDS = "I can't help with that."


def _refuses(turn: ChatTurn) -> Reply:
    return Reply(refusal=WORDS)


@pytest.fixture
async def token(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
) -> str:
    token = await token_for(tenant)
    await simulated_profile(
        http, token, temporal_client, tenant, upstream, PROFILE, MODEL, _refuses
    )
    return token


async def test_a_refusal_is_answered_in_its_words_on_every_surface(
    api_url: str, token: str
) -> None:
    chat = AsyncOpenAI(base_url=f"{api_url}/v1", api_key=token, max_retries=0)
    ask: Any = {"model": PROFILE, "messages": [{"role": "user", "content": "x"}]}
    whole = await chat.chat.completions.create(**ask)
    assert (whole.choices[0].message.content, whole.choices[0].finish_reason) == (
        WORDS,
        "content_filter",
    )
    pieces, finish = [], None
    async for chunk in await chat.chat.completions.create(**ask, stream=True):
        for choice in chunk.choices:
            pieces.append(choice.delta.content or "")
            finish = choice.finish_reason or finish
    assert ("".join(pieces), finish) == (WORDS, "content_filter")

    responses = await chat.responses.create(model=PROFILE, input="x")
    assert responses.status == "incomplete"
    assert responses.incomplete_details is not None
    assert responses.incomplete_details.reason == "content_filter"
    assert responses.output_text == WORDS
    await chat.close()

    messages = AsyncAnthropic(base_url=api_url, api_key=token, max_retries=0)
    body: Any = {
        "model": PROFILE,
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "x"}],
    }
    answered = await messages.messages.create(**body)
    async with messages.messages.stream(**body) as stream:
        streamed = await stream.get_final_message()
    for message in (answered, streamed):
        assert message.stop_reason == "refusal"
        blocks: list[Any] = list(message.content)
        assert [(b.type, b.text) for b in blocks] == [("text", WORDS)]
    await messages.close()
