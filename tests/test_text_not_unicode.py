"""A JSON string may escape half of a surrogate pair on its own ("\\ud83d": a JavaScript agent
that cut a string inside an emoji sends exactly that). The document is valid JSON, but the string
holds no text: it cannot be hashed, sent or stored.

- In a request, every surface refuses it as a validation error naming the field (in its own
  envelope where it has one), before anything is claimed or called; before, each invoke surface
  answered 500. The official SDKs cannot send such a string (they encode the body as UTF-8
  first), so these requests are raw HTTP.
- In a provider's answer, it is passed on with U+FFFD in its place, as a UTF-8 decoder does with
  bytes that are no text; before, the call closed as the gateway's own failure (a 409
  `internal`), the answer paid for and lost.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from providers.upstream import Fault, FaultKind, UpstreamServer
from providers.upstream.turn import ChatTurn, Reply, ToolCallReply
from tests.helpers.receipts import receipt_count
from tests.helpers.surfaces import Catalog

LONE = "\\ud83d"  # the escape as it appears in the JSON text: a high surrogate, no low one
PAIR = "\\ud83d\\ude00"  # 😀, escaped as a pair: text


def _bodies(profile: str) -> list[tuple[str, dict[str, Any], str]]:
    """(path, body with the marker "TEXT" where the escape goes, the field it is in)."""
    chat = [{"role": "user", "content": "TEXT"}]
    return [
        ("/v1/chat/completions", {"model": profile, "messages": chat}, "body.messages.0.content"),
        (
            "/v1/messages",
            {"model": profile, "max_tokens": 20, "messages": chat},
            "body.messages.0.content",
        ),
        (
            "/v1/messages/count_tokens",
            {"model": profile, "messages": chat},
            "body.messages.0.content",
        ),
        ("/v1/responses", {"model": profile, "input": "TEXT"}, "body.input"),
        (
            "/gateway/invoke",
            {"profileId": profile, "request": {"messages": chat}},
            "body.request.messages.0.content",
        ),
        ("/gateway/embed", {"profileId": profile, "inputs": ["fine", "TEXT"]}, "body.inputs.1"),
        ("/v1/embeddings", {"model": profile, "input": ["TEXT"]}, "body.input.0"),
        ("/factory/pricebook-revisions", {"revision": "TEXT", "entries": []}, "body.revision"),
    ]


async def _post(
    http: httpx.AsyncClient, auth: dict[str, str], path: str, body: dict[str, Any], text: str
) -> httpx.Response:
    content = json.dumps(body).replace("TEXT", text).encode()
    headers = {**auth, "content-type": "application/json", "anthropic-version": "2023-06-01"}
    return await http.post(path, content=content, headers=headers, timeout=30)


async def test_a_string_that_is_not_text_is_refused_naming_its_field(
    http: httpx.AsyncClient,
    catalog: Catalog,
    upstream: UpstreamServer,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
) -> None:
    calls = upstream.state.stats.total
    for path, body, field in _bodies(catalog.profile("openai")):
        resp = await _post(http, catalog.auth, path, body, LONE)
        # The SDK surfaces answer 400, as OpenAI and Anthropic do; the gateway's own, 422.
        expected = 400 if path.startswith("/v1/") else 422
        assert resp.status_code == expected, (path, resp.status_code, resp.text)
        found = resp.json()
        if path.startswith("/v1/messages"):  # Anthropic's envelope, which its SDK reads
            assert found["type"] == "error", found
            assert field in found["error"]["message"], (path, found)
        else:
            assert [e["field"] for e in found["errors"]] == [field], (path, found)
    assert await receipt_count(sessions, tenant) == 0
    assert upstream.state.stats.total == calls


async def test_an_escaped_pair_is_text(
    http: httpx.AsyncClient,
    catalog: Catalog,
    sessions: async_sessionmaker[AsyncSession],
    tenant: str,
) -> None:
    path, body, _ = _bodies(catalog.profile("openai"))[0]
    resp = await _post(http, catalog.auth, path, body, PAIR)
    assert resp.status_code == 200, resp.text
    assert "\U0001f600" in resp.json()["choices"][0]["message"]["content"]  # echoed back
    assert await receipt_count(sessions, tenant) == 1


async def _answer(
    http: httpx.AsyncClient, catalog: Catalog, protocol: str, stream: bool
) -> tuple[str, str, dict[str, Any]]:
    """One gateway call: the answer's text, its first tool call's arguments, and its receipt."""
    body = {
        "profileId": catalog.profile(protocol),
        "request": {"messages": [{"role": "user", "content": "hi"}]},
        "stream": stream,
    }
    if not stream:
        resp = await http.post("/gateway/invoke", headers=catalog.auth, json=body, timeout=30)
        assert resp.status_code == 200, resp.text
        output = resp.json()["output"]
        return output["text"], output["tool_calls"][0]["arguments"], resp.json()["receipt"]
    async with http.stream(
        "POST", "/gateway/invoke", headers=catalog.auth, json=body, timeout=30
    ) as sse:
        lines = [line async for line in sse.aiter_lines()]
    events = [json.loads(line[6:]) for line in lines if line.startswith("data: ")]
    text = "".join(e["text"] for e in events if e.get("type") == "text_delta")
    arguments = "".join(
        e.get("arguments_delta", "") for e in events if e.get("type") == "tool_call_delta"
    )
    return text, arguments, events[-1]


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_a_providers_answer_that_is_not_text_is_passed_on_with_a_replacement(
    http: httpx.AsyncClient,
    catalog: Catalog,
    upstream: UpstreamServer,
    protocol: str,
    stream: bool,
) -> None:
    # The provider's JSON escapes the first half of 😀 alone, in the text and in a tool call's
    # arguments: the answer stands, with U+FFFD where the half was, and its receipt is Completed.
    def cut(turn: ChatTurn) -> Reply:
        return Reply(
            text="cut \ud83d here",
            tool_calls=[ToolCallReply(name="note", arguments={"text": "\ud83d"})],
            verbatim=True,
        )

    upstream.register(catalog.model(protocol), cut)
    text, arguments, receipt = await _answer(http, catalog, protocol, stream)
    assert text == "cut \ufffd here", text
    assert json.loads(arguments) == {"text": "\ufffd"}, arguments
    assert receipt["outcome"] == "Completed", receipt


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_a_pair_cut_between_two_deltas_arrives_whole(
    http: httpx.AsyncClient,
    catalog: Catalog,
    upstream: UpstreamServer,
    protocol: str,
    stream: bool,
) -> None:
    # A proxy that re-chunks by UTF-16 index cuts 😀 between two deltas, each half escaped on
    # its own: in the text ("ab\ud83d" then "\ude00cd"), and in the arguments, cut every 12
    # characters ('{"t":"abcde\ud83d' then '\ude00"}'). Each half alone had become U+FFFD.
    # The text's last piece ends in a half that nothing completes: the tool call follows, so it
    # is given up as U+FFFD then; so is the half that a piece not starting with the other half
    # follows, in the second call's arguments.
    def cut(turn: ChatTurn) -> Reply:
        return Reply(
            text="ab\ud83d\ude00cd\ud83d",
            text_piece=3,
            tool_calls=[
                ToolCallReply(name="note", arguments='{"t":"abcde\ud83d\ude00"}'),
                ToolCallReply(name="note", arguments='{"t":"abcde\ud83d"}'),
            ],
            verbatim=True,
        )

    upstream.register(catalog.model(protocol), cut)
    text, arguments, receipt = await _answer(http, catalog, protocol, stream)
    assert text == "ab\U0001f600cd\ufffd", text
    if not stream:
        assert json.loads(arguments) == {"t": "abcde\U0001f600"}, arguments
    else:  # both calls' fragments, one after the other
        assert arguments == '{"t":"abcde\U0001f600"}{"t":"abcde\ufffd"}', arguments
    assert receipt["outcome"] == "Completed", receipt


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
async def test_a_providers_error_message_that_is_not_text_is_passed_on_with_a_replacement(
    http: httpx.AsyncClient, catalog: Catalog, upstream: UpstreamServer, protocol: str
) -> None:
    model = catalog.model(protocol)
    upstream.inject(model, Fault(kind=FaultKind.SERVER_ERROR, message="down \ud83d for now"))
    try:
        body = {
            "profileId": catalog.profile(protocol),
            "request": {"messages": [{"role": "user", "content": "hi"}]},
        }
        resp = await http.post("/gateway/invoke", headers=catalog.auth, json=body, timeout=30)
    finally:
        upstream.state.clear_faults(model)
    assert resp.status_code == 503, resp.text
    assert "down \ufffd for now" in resp.json()["error"]["message"], resp.text
