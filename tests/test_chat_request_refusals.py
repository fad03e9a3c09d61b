"""Chat Completions requests refused before anything is claimed or sent, naming what is wrong:
a number JSON cannot carry (NaN, Infinity, 1e400) anywhere in the body, on every surface (it
was claimed, then failed at the provider SDK's encoding as a cut stream: retried, fallen back
from, a breaker strike on a healthy deployment); a tool_choice form the gateway cannot express
(`allowed_tools`, `custom`), named by its type; and `moderation`, a guarantee the gateway
cannot keep, which was dropped silently. Hints that do not change the answer stay accepted (an
unknown field is refused: tests/test_chat_unknown_fields.py)."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import openai
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from providers.upstream import UpstreamServer
from store.receipts import by_key
from tests.helpers.surfaces import Catalog

# A tool whose schema holds `1e400` (Python's json reads it as inf), as raw JSON text: no JSON
# encoder writes it, and the client sends it as written.
OVERFLOW_TOOL = (
    b'[{"type":"function","function":{"name":"count","parameters":{"type":"object",'
    b'"properties":{"n":{"type":"number","maximum":1e400}}}}}]'
)


async def _claimed(sessions: async_sessionmaker[AsyncSession], tenant: str, key: str) -> bool:
    async with sessions() as session:
        return await by_key(session, tenant, key) is not None


def _chat(catalog: Catalog, more: bytes) -> bytes:
    model = catalog.profile("openai").encode()
    return b'{"model":"' + model + b'","messages":[{"role":"user","content":"hi"}],' + more + b"}"


@pytest.mark.parametrize(
    ("more", "param"),
    [
        (b'"tools":' + OVERFLOW_TOOL, "tools.0.function.parameters.properties.n.maximum"),
        (
            b'"response_format":{"type":"json_schema","json_schema":{"name":"r","schema":'
            b'{"type":"object","properties":{"x":{"type":"number","minimum":NaN}}}}}',
            "response_format.json_schema.schema.properties.x.minimum",
        ),
        (b'"temperature":-Infinity', "temperature"),
    ],
)
async def test_a_non_finite_number_is_a_400_naming_it_before_any_claim(
    http: httpx.AsyncClient,
    catalog: Catalog,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
    more: bytes,
    param: str,
) -> None:
    key = f"nf-{uuid.uuid4().hex}"
    before = upstream.requests(catalog.model("openai"))
    resp = await http.post(
        "/v1/chat/completions",
        content=_chat(catalog, more),
        headers={**catalog.auth, "Idempotency-Key": key, "Content-Type": "application/json"},
    )
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert (error["type"], error["param"]) == ("invalid_request_error", param), error
    assert "not finite" in error["message"]
    # Refused at the edge: nothing claimed under the key, nothing sent to the provider.
    assert not await _claimed(sessions, tenant, key)
    assert upstream.requests(catalog.model("openai")) == before


async def test_the_messages_surface_refuses_one_in_its_own_envelope(
    http: httpx.AsyncClient, catalog: Catalog, upstream: UpstreamServer
) -> None:
    body = (
        b'{"model":"' + catalog.profile("anthropic").encode() + b'","max_tokens":20,'
        b'"messages":[{"role":"user","content":"hi"}],"tools":[{"name":"count",'
        b'"input_schema":{"type":"object","properties":{"n":{"maximum":1e400}}}}]}'
    )
    before = upstream.requests(catalog.model("anthropic"))
    resp = await http.post(
        "/v1/messages",
        content=body,
        headers={**catalog.auth, "Content-Type": "application/json"},
    )
    assert resp.status_code == 400, resp.text
    assert resp.json()["type"] == "error"
    assert resp.json()["error"]["type"] == "invalid_request_error"
    assert "body.tools.0.input_schema.properties.n.maximum" in resp.json()["error"]["message"]
    assert upstream.requests(catalog.model("anthropic")) == before


async def test_finite_numbers_and_the_words_nan_and_infinity_pass(
    http: httpx.AsyncClient, catalog: Catalog
) -> None:
    # In a string they are text; 1e-400 is a finite number (zero); a long exponent that stays
    # in range is a number like any other.
    resp = await http.post(
        "/v1/chat/completions",
        content=_chat(catalog, b'"temperature":1e-400,"top_p":0.0001e4').replace(
            b'"hi"', b'"NaN, Infinity and 1e400 are words here"'
        ),
        headers={**catalog.auth, "Content-Type": "application/json"},
    )
    assert resp.status_code == 200, resp.text


@pytest.mark.parametrize(
    ("choice", "kind"),
    [
        (
            {
                "type": "allowed_tools",
                "allowed_tools": {
                    "mode": "auto",
                    "tools": [{"type": "function", "function": {"name": "lookup"}}],
                },
            },
            "allowed_tools",
        ),
        ({"type": "custom", "custom": {"name": "lookup"}}, "custom"),
    ],
)
async def test_a_tool_choice_form_the_gateway_cannot_express_is_refused_by_its_type(
    openai_sdk: Any, catalog: Catalog, upstream: UpstreamServer, choice: dict[str, Any], kind: str
) -> None:
    before = upstream.requests(catalog.model("openai"))
    tool: Any = {"type": "function", "function": {"name": "lookup", "parameters": {}}}
    with pytest.raises(openai.BadRequestError) as refused:
        await openai_sdk.chat.completions.create(
            model=catalog.profile("openai"),
            messages=[{"role": "user", "content": "look it up"}],
            tools=[tool],
            tool_choice=choice,
        )
    error: Any = refused.value.body
    assert error["param"] == "tool_choice.type", error
    assert f"tool_choice type {kind!r} is not supported" in error["message"], error
    assert "exactly when mode" not in error["message"]
    assert upstream.requests(catalog.model("openai")) == before


async def test_a_moderation_policy_is_refused_never_dropped(
    openai_sdk: Any, catalog: Catalog, upstream: UpstreamServer
) -> None:
    before = upstream.requests(catalog.model("openai"))
    with pytest.raises(openai.BadRequestError) as refused:
        await openai_sdk.chat.completions.create(
            model=catalog.profile("openai"),
            messages=[{"role": "user", "content": "screen me"}],
            extra_body={"moderation": {"model": "omni-moderation-latest"}},
        )
    error: Any = refused.value.body
    assert error["param"] == "moderation" and "moderation policy" in error["message"], error
    assert upstream.requests(catalog.model("openai")) == before
    # Hints the gateway does not use are still taken and ignored, as before; so is a null
    # moderation, which asks for nothing.
    answer = await openai_sdk.chat.completions.create(
        model=catalog.profile("openai"),
        messages=[{"role": "user", "content": "hello"}],
        user="someone",
        metadata={"team": "a"},
        extra_body={"moderation": None, "prompt_cache_key": "thread-1"},
    )
    assert answer.choices[0].message.content
