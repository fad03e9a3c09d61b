"""Chat Completions' top level is an allow list, as OpenAI's is: a field this gateway does not
know is a 400 naming it, before anything is claimed or sent. Vendor settings that change the
answer (vLLM's `guided_json`, `structured_outputs`, `chat_template_kwargs`, `min_p`,
`repetition_penalty`; Anthropic's `thinking`; OpenRouter's `reasoning`) were answered 200 with
none applied, and routed without the need they implied. The fields the request model declares,
the unmapped settings at their off values, and the hints that do not change the answer stay
accepted, so are the bodies the openai SDK, LangChain's ChatOpenAI and the Agents SDK send by
default, and a field sent as null. The openai SDK is the client; the local upstream the
provider."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import openai
import pytest
from openai import AsyncOpenAI
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from providers.upstream import UpstreamServer
from store.receipts import by_key
from tests.helpers.surfaces import Catalog

USER: Any = [{"role": "user", "content": "hello"}]
# Settings other servers take and this gateway cannot apply, each as its clients send it.
VENDOR_FIELDS: dict[str, Any] = {
    "guided_json": {"type": "object", "properties": {"a": {"type": "string"}}},
    "structured_outputs": {"json": {"type": "object"}},
    "chat_template_kwargs": {"enable_thinking": False},
    "thinking": {"type": "enabled", "budget_tokens": 1024},
    "reasoning": {"effort": "high"},
    "min_p": 0.1,
    "repetition_penalty": 1.2,
    "top_a": 0.5,
}


async def _claimed(sessions: async_sessionmaker[AsyncSession], tenant: str, key: str) -> bool:
    async with sessions() as session:
        return await by_key(session, tenant, key) is not None


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("field", list(VENDOR_FIELDS))
async def test_an_unknown_field_is_a_400_naming_it_and_nothing_is_sent(
    openai_sdk: AsyncOpenAI,
    catalog: Catalog,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    field: str,
    stream: bool,
) -> None:
    key = f"unknown-{uuid.uuid4().hex}"
    before = upstream.requests(catalog.model("openai"))
    with pytest.raises(openai.BadRequestError) as refused:
        await openai_sdk.chat.completions.create(
            model=catalog.profile("openai"),
            messages=USER,
            stream=stream,
            extra_body={field: VENDOR_FIELDS[field]},
            extra_headers={"Idempotency-Key": key},
        )
    error: Any = refused.value.body
    assert (refused.value.param, error["type"]) == (field, "invalid_request_error"), error
    assert "unknown parameter" in error["message"] and "never dropped" in error["message"]
    assert upstream.requests(catalog.model("openai")) == before
    assert not await _claimed(sessions, tenant, key)


async def test_each_unknown_field_is_named_and_a_known_refusal_comes_first(
    openai_sdk: AsyncOpenAI, catalog: Catalog
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        await openai_sdk.chat.completions.create(
            model=catalog.profile("openai"),
            messages=USER,
            seed=7,
            extra_body={"min_p": 0.1, "guided_json": {"type": "object"}},
        )
    problem = refused.value.response.json()
    assert refused.value.param == "seed", problem
    fields = [e["field"] for e in problem["errors"]]
    assert fields == ["body.seed", "body.guided_json", "body.min_p"], problem


async def test_every_accepted_hint_still_answers(
    openai_sdk: AsyncOpenAI, catalog: Catalog, upstream: UpstreamServer
) -> None:
    """Every hint that does not change the answer, the unmapped settings at their off values,
    and a null for any field (an unknown one included): a 200, whole and streamed."""
    hints: Any = {
        "user": "someone",
        "safety_identifier": "hashed-user",
        "metadata": {"team": "a"},
        "store": True,
        "service_tier": "auto",
        "prompt_cache_key": "thread-1",
        "prompt_cache_retention": "24h",
        "prompt_cache_options": {"mode": "implicit", "ttl": "30m"},
        "modalities": ["text"],
        "top_p": 1,
        "logprobs": False,
        "frequency_penalty": 0,
        "presence_penalty": 0,
        "logit_bias": {},
        "n": 1,
        "temperature": 0.2,
        "max_completion_tokens": 50,
        "extra_body": {"guided_json": None, "min_p": None, "seed": None, "moderation": None},
    }
    before = upstream.requests(catalog.model("openai"))
    whole = await openai_sdk.chat.completions.create(
        model=catalog.profile("openai"), messages=USER, **hints
    )
    assert whole.choices[0].message.content
    streamed = await openai_sdk.chat.completions.create(
        model=catalog.profile("openai"),
        messages=USER,
        stream=True,
        stream_options={"include_usage": True, "include_obfuscation": False},
        **hints,
    )
    text = "".join([c.choices[0].delta.content or "" async for c in streamed if c.choices])
    assert text == whole.choices[0].message.content
    assert upstream.requests(catalog.model("openai")) == before + 2


# What the libraries send on a plain call, as their sources build it: the openai SDK only what
# it is given; LangChain's ChatOpenAI `stream` always, `n` and `temperature` (older versions'
# defaults), and `stream_options` when it streams; the Agents SDK's chat-completions model
# `stream` (plus `store` and `stream_options` when its client points at api.openai.com, or its
# ModelSettings set them).
DEFAULT_BODIES: dict[str, dict[str, Any]] = {
    "openai-sdk": {},
    "langchain": {"stream": False, "n": 1, "temperature": 0.7},
    "langchain-stream": {"stream": True, "n": 1, "stream_options": {"include_usage": True}},
    "agents-sdk": {"stream": True, "store": True, "stream_options": {"include_usage": True}},
}


@pytest.mark.parametrize("body", list(DEFAULT_BODIES))
async def test_what_the_libraries_send_by_default_is_answered(
    http: httpx.AsyncClient, catalog: Catalog, body: str
) -> None:
    resp = await http.post(
        "/v1/chat/completions",
        json={"model": catalog.profile("openai"), "messages": USER, **DEFAULT_BODIES[body]},
        headers=catalog.auth,
    )
    assert resp.status_code == 200, resp.text
