"""A Chat Completions message's `name` (who spoke, among participants of one role) is carried to
an OpenAI deployment, which shows it to the model; it was dropped as an undeclared field is, and
AutoGen's OpenAIChatCompletionClient sets it on every user and assistant message, so the model
answered without knowing who said what. It is the request's, so its key's: the same key with
another name is a 409 `idempotency-key-reused`, while a request without one hashes as it did
before names were carried (its key still replays across the upgrade). A name that is not a
string is a 400 naming the field, before anything is claimed or sent. The openai SDK is the
client; the local upstream the provider."""

from __future__ import annotations

import uuid
from typing import Any

import openai
import pytest
from openai import AsyncOpenAI
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api.calls import hashed
from api.openai_shapes import ChatCompletionIn, to_chat_request
from api.surface import Headers
from domain.hashing import request_hash
from domain.policy import DataClassification
from providers.upstream import UpstreamServer
from store.receipts import by_key
from tests.helpers.surfaces import Catalog

NAMELESS: list[dict[str, Any]] = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "hello"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f"}}],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "ok"},
]
# NAMELESS's request hash, computed by the code before `name` was carried: a key used then
# must replay after the upgrade, so its hash may not move.
NAMELESS_HASH = "sha256:60d472f121ec062ce94e535450d1e3fa8f7d7bf844272659a7a4bad12f8e3f48"


def _hash(messages: list[dict[str, Any]]) -> str:
    chat = to_chat_request(ChatCompletionIn.model_validate({"model": "p", "messages": messages}))
    headers = Headers(None, None, "default", "k", DataClassification.INTERNAL, None)
    return request_hash(hashed(headers.chat_call("p", chat, buffered=True)))


def test_a_request_without_names_hashes_as_before_and_a_name_is_hashed() -> None:
    assert _hash(NAMELESS) == NAMELESS_HASH
    named = [{**m, "name": "alice"} if m["role"] == "user" else m for m in NAMELESS]
    renamed = [{**m, "name": "bob"} if m["role"] == "user" else m for m in NAMELESS]
    assert len({NAMELESS_HASH, _hash(named), _hash(renamed)}) == 3


async def _claimed(sessions: async_sessionmaker[AsyncSession], tenant: str, key: str) -> bool:
    async with sessions() as session:
        return await by_key(session, tenant, key) is not None


async def test_each_speakers_name_reaches_an_openai_deployment(
    openai_sdk: AsyncOpenAI, catalog: Catalog, seen: dict[str, list[dict[str, Any]]]
) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages: Any = [
        {"role": "developer", "content": "moderate", "name": "host"},
        {"role": "user", "content": "I say yes", "name": "alice"},
        {"role": "assistant", "content": "noted", "name": "critic"},
        {"role": "assistant", "content": "and I agree", "name": "planner"},
        {"role": "assistant", "content": None, "tool_calls": [call], "name": "planner"},
        # OpenAI's tool message has no name: accepted and not sent on, as before.
        {"role": "tool", "tool_call_id": "c1", "content": "ok", "name": "f"},
        {"role": "user", "content": "and I say no"},
    ]
    answer = await openai_sdk.chat.completions.create(
        model=catalog.profile("openai"), messages=messages
    )
    assert answer.choices[0].message.content
    [body] = seen["openai"]
    sent = [
        (m["role"], m["content"], m.get("name"), len(m.get("tool_calls", [])))
        for m in body["messages"]
    ]
    # Two named assistants' turns stay two (merged, one speaker's words went under the other's
    # name); one speaker's consecutive turns are still one, its calls followed by their results.
    assert sent == [
        ("system", "moderate", "host", 0),
        ("user", "I say yes", "alice", 0),
        ("assistant", "noted", "critic", 0),
        ("assistant", "and I agree", "planner", 1),
        ("tool", "ok", None, 0),
        ("user", "and I say no", None, 0),
    ], body["messages"]


async def test_the_same_key_with_another_name_is_refused_not_replayed(
    openai_sdk: AsyncOpenAI, catalog: Catalog, upstream: UpstreamServer
) -> None:
    model, key = catalog.model("openai"), f"name-{uuid.uuid4().hex}"

    async def call(name: str | None) -> Any:
        message: Any = {"role": "user", "content": "who am I?"}
        if name is not None:
            message["name"] = name
        return await openai_sdk.chat.completions.create(
            model=catalog.profile("openai"),
            messages=[message],
            extra_headers={"Idempotency-Key": key},
        )

    before = upstream.requests(model)
    first = await call("alice")
    assert (await call("alice")).id == first.id  # replayed
    for other in ("bob", None):
        with pytest.raises(openai.ConflictError) as conflict:
            await call(other)
        problem = conflict.value.response.json()
        assert problem["type"].endswith("/idempotency-key-reused"), problem
    assert upstream.requests(model) - before == 1


@pytest.mark.parametrize("name", [7, ["alice"]], ids=["number", "list"])
async def test_a_name_that_is_not_a_string_is_a_400_naming_it(
    openai_sdk: AsyncOpenAI,
    catalog: Catalog,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    name: Any,
) -> None:
    key = f"bad-name-{uuid.uuid4().hex}"
    messages: Any = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hello", "name": name},
    ]
    before = upstream.requests(catalog.model("openai"))
    with pytest.raises(openai.BadRequestError) as refused:
        await openai_sdk.chat.completions.create(
            model=catalog.profile("openai"),
            messages=messages,
            extra_headers={"Idempotency-Key": key},
        )
    error: Any = refused.value.body
    assert (refused.value.param, error["type"]) == ("messages.1.name", "invalid_request_error")
    assert upstream.requests(catalog.model("openai")) == before
    assert not await _claimed(sessions, tenant, key)


async def test_calls_of_differently_named_turns_are_still_followed_by_their_results(
    openai_sdk: AsyncOpenAI, catalog: Catalog, seen: dict[str, list[dict[str, Any]]]
) -> None:
    # [assistant(call a), assistant(call b), tool a, tool b]: OpenAI's 400 unless one turn holds
    # both calls, as it did before names were carried; kept apart for their names, it failed.
    def call(i: str) -> dict[str, Any]:
        return {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}}

    messages: Any = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [call("a")], "name": "planner"},
        {"role": "assistant", "content": None, "tool_calls": [call("b")]},
        {"role": "tool", "tool_call_id": "a", "content": "1"},
        {"role": "tool", "tool_call_id": "b", "content": "2"},
    ]
    answer = await openai_sdk.chat.completions.create(
        model=catalog.profile("openai"), messages=messages
    )
    assert answer.choices[0].message.content
    [body] = seen["openai"]
    sent = [(m["role"], m.get("name"), len(m.get("tool_calls", []))) for m in body["messages"]]
    assert sent == [
        ("user", None, 0),
        ("assistant", "planner", 2),
        ("tool", None, 0),
        ("tool", None, 0),
    ], body["messages"]
