"""A model's refusal (OpenAI's `refusal` field: a structured-output request it declines, content
null) was dropped: the caller got an empty answer ended `stop`. It is now answered in its words
on every surface: on Chat Completions in OpenAI's own `refusal` field, ending `stop`, so that the
SDK's `.parse()` and `.stream()` helpers give it as a refusal (as content ending `content_filter`
the first raised, the second tried the words as JSON); on Messages ending `refusal` (the stop
reason Anthropic's own refusals carry), on Responses `incomplete` (`content_filter`); streamed,
whole and replayed alike."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from anthropic import AsyncAnthropic
from openai import AsyncOpenAI
from pydantic import BaseModel
from temporalio.client import Client

from providers.upstream import UpstreamServer
from providers.upstream.turn import ChatTurn, Reply
from tests.conftest import TokenFactory
from tests.helpers.catalog import profile_event, publish, record_evidence, register

PROFILE, MODEL = "refuses", "refuses-sim"


class Answer(BaseModel):
    answer: str


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
    auth = {"Authorization": f"Bearer {token}"}
    upstream.register(MODEL, _refuses)
    # Measured for structured output too: the SDK's parse helpers ask for a JSON schema.
    await register(http, auth, "sim/refuses", model=MODEL, endpointRef=upstream.endpoint_ref)
    evidence = {"tool-calling": 0.9, "json-schema": 1.0, "strict-json": 1.0}
    await record_evidence(temporal_client, tenant, "sim/refuses", evidence)
    approved = await http.post("/factory/model-deployments/sim/refuses/approve", headers=auth)
    assert approved.status_code == 200, approved.text
    assert (await publish(http, auth, profile_event(PROFILE, ["sim/refuses"]))).is_success
    return token


async def test_a_refusal_is_answered_in_its_words_on_every_surface(
    api_url: str, token: str
) -> None:
    chat = AsyncOpenAI(base_url=f"{api_url}/v1", api_key=token, max_retries=0)
    ask: Any = {"model": PROFILE, "messages": [{"role": "user", "content": "x"}]}
    key = {"Idempotency-Key": f"refused-{uuid.uuid4().hex}"}
    for _ in range(2):  # the call, then its replay from the stored answer
        whole = await chat.chat.completions.create(**ask, extra_headers=key)
        said = whole.choices[0].message
        assert (said.content, said.refusal, whole.choices[0].finish_reason) == (
            None,
            WORDS,
            "stop",
        )
    pieces, finish = [], None
    async for chunk in await chat.chat.completions.create(**ask, stream=True):
        for choice in chunk.choices:
            assert choice.delta.content in (None, "")
            pieces.append(choice.delta.refusal or "")
            finish = choice.finish_reason or finish
    assert ("".join(pieces), finish) == (WORDS, "stop")
    # The SDK's structured-output helpers give it as a refusal, with nothing parsed.
    parsed = await chat.chat.completions.parse(**ask, response_format=Answer)
    assert (parsed.choices[0].message.refusal, parsed.choices[0].message.parsed) == (WORDS, None)
    async with chat.chat.completions.stream(**ask, response_format=Answer) as helper:
        final = await helper.get_final_completion()
    assert (final.choices[0].message.refusal, final.choices[0].message.parsed) == (WORDS, None)

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
