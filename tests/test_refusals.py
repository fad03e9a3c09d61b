"""A model's refusal (OpenAI's `refusal` field: a structured-output request it declines, content
null) was dropped: the caller got an empty answer ended `stop`. It is now answered in its words
on every surface: on Chat Completions in OpenAI's own `refusal` field, ending `stop`, so that the
SDK's `.parse()` and `.stream()` helpers give it as a refusal (as content ending `content_filter`
the first raised, the second tried the words as JSON); on Messages ending `refusal` (the stop
reason Anthropic's own refusals carry), on Responses in OpenAI's own `refusal` part (a completed
response, which `.parse()` and `.stream()` give as a refusal); streamed, whole and replayed
alike."""

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

    # On Responses in OpenAI's own `refusal` part, a completed response: as text ended
    # `content_filter`, `.parse()` and `.stream(text_format=…)` read the words as JSON and
    # raised a ValidationError. A refusal sent back as history is taken as the words.
    again = {"Idempotency-Key": f"refused-{uuid.uuid4().hex}"}
    history: Any = [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": [{"type": "refusal", "refusal": WORDS}]},
        {"role": "user", "content": "x"},
    ]
    for _ in range(2):  # the call, then its replay
        responses = await chat.responses.create(model=PROFILE, input=history, extra_headers=again)
        assert (responses.status, responses.incomplete_details) == ("completed", None)
        said_item: Any = responses.output[0]
        assert said_item.type == "message" and len(responses.output) == 1
        assert [(p.type, getattr(p, "refusal", None)) for p in said_item.content] == [
            ("refusal", WORDS)
        ]
    parsed_response = await chat.responses.parse(model=PROFILE, input="x", text_format=Answer)
    assert parsed_response.output_parsed is None
    kinds: list[str] = []
    async with chat.responses.stream(model=PROFILE, input="x", text_format=Answer) as helper:
        async for event in helper:
            kinds.append(event.type)
        streamed_response = await helper.get_final_response()
    assert "response.refusal.delta" in kinds and "response.refusal.done" in kinds
    assert "response.output_text.delta" not in kinds
    streamed_item: Any = streamed_response.output[0]
    [part] = streamed_item.content
    assert (part.type, getattr(part, "refusal", None)) == ("refusal", WORDS)
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
