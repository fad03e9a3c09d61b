"""A request with nothing to answer is refused as OpenAI refuses it, before anything is claimed:
Responses' `input: ""` or `input: []` and Chat Completions' `messages: []` are the caller's 400
naming the field (`param`), with no receipt and nothing sent to the provider. Responses' were
claimed and sent (the local upstream answers `""`, and refuses `[]`: a Failed receipt). A
conversation of only a system message is a request OpenAI answers: it is sent on."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import openai
import pytest
from openai import AsyncOpenAI
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from providers.upstream import UpstreamServer
from tests.helpers.receipts import receipt_count
from tests.helpers.surfaces import Catalog


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("empty", ["", []], ids=["empty-text", "no-items"])
async def test_an_empty_responses_input_is_a_400_naming_input_with_no_receipt(
    openai_sdk: AsyncOpenAI,
    catalog: Catalog,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    empty: Any,
    stream: bool,
) -> None:
    receipts, sent = (
        await receipt_count(sessions, tenant),
        upstream.requests(catalog.model("openai")),
    )
    with pytest.raises(openai.BadRequestError) as refused:
        # Instructions are no input: OpenAI refuses `input: []` beside them too.
        await openai_sdk.responses.create(
            model=catalog.profile("openai"), input=empty, instructions="Be brief.", stream=stream
        )
    error: Any = refused.value.body
    assert (error["param"], error["type"]) == ("input", "invalid_request_error"), error
    assert "must not be empty" in error["message"]
    assert await receipt_count(sessions, tenant) == receipts
    assert upstream.requests(catalog.model("openai")) == sent


async def test_an_empty_input_continuing_a_stored_response_is_told_why_that_cannot_be(
    openai_sdk: AsyncOpenAI, catalog: Catalog
) -> None:
    """`[]` beside previous_response_id is a client leaning on stored state: told the gateway is
    stateless, which is what it must change, not that its (deliberately) empty input is."""
    with pytest.raises(openai.BadRequestError) as refused:
        await openai_sdk.responses.create(
            model=catalog.profile("openai"), input=[], previous_response_id="resp_1"
        )
    assert refused.value.param == "previous_response_id", refused.value.body


async def test_no_chat_messages_is_a_400_naming_messages_with_no_receipt(
    openai_sdk: AsyncOpenAI,
    catalog: Catalog,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
) -> None:
    receipts, sent = (
        await receipt_count(sessions, tenant),
        upstream.requests(catalog.model("openai")),
    )
    with pytest.raises(openai.BadRequestError) as refused:
        await openai_sdk.chat.completions.create(model=catalog.profile("openai"), messages=[])
    assert (refused.value.param, refused.value.type) == ("messages", "invalid_request_error")
    assert await receipt_count(sessions, tenant) == receipts
    assert upstream.requests(catalog.model("openai")) == sent


async def test_a_system_message_alone_is_sent_on_on_both_surfaces(
    openai_sdk: AsyncOpenAI,
    catalog: Catalog,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
) -> None:
    model = catalog.profile("openai")
    system: Any = {"role": "system", "content": "Say hello."}
    asks: list[Callable[[], Awaitable[object]]] = [
        lambda: openai_sdk.chat.completions.create(model=model, messages=[system]),
        lambda: openai_sdk.responses.create(model=model, input=[system]),
    ]
    for ask in asks:
        receipts = await receipt_count(sessions, tenant)
        sent = upstream.requests(catalog.model("openai"))
        # The local upstream refuses it, as some servers do: the provider's refusal, told as a
        # failed call (a receipt, no param of the request's), not the gateway's own.
        with pytest.raises(openai.BadRequestError) as told:
            await ask()
        assert told.value.param is None and "model call failed" in told.value.message
        assert upstream.requests(catalog.model("openai")) == sent + 1
        assert await receipt_count(sessions, tenant) == receipts + 1
