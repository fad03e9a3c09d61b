"""The canary: one unique marker planted in prompts, system prompts, tool definitions, tool
arguments, tool results and outputs, across chat (both provider protocols, plain and
streamed), tool calls, embeddings, failed and partial invocations, and an evaluation whose
model answers every suite case with the marker. Then everything this service writes is searched:
a full pg_dump, the captured logs, the exported spans, the metrics, and every Temporal workflow
history started meanwhile (as JSON and as raw protobuf bytes, where payloads are not base64).
The operator console's pages (every page of this tenant's deployments, profiles, receipts, the
preview, overview and schedules) are read back too, and the server logs cover their requests.
The marker must appear nowhere; each place is first shown to hold the test's own traffic."""

from __future__ import annotations

import json
import logging
import re
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from temporalio.api.history.v1 import History
from temporalio.client import Client, WorkflowExecution

from core import metrics
from core.security import new_client_secret
from core.settings import Settings
from domain.enums import Role, Scope
from providers.upstream import ChatTurn, Fault, FaultKind, Reply, ToolCallReply, UpstreamServer
from store.clients import upsert_client
from tests.conftest import TokenFactory
from tests.helpers.browser import ConsoleSession
from tests.helpers.catalog import approved_profile, register
from tests.helpers.deadline import eventually
from tests.helpers.dump import pg_dump
from tests.helpers.spans import SpanCapture, exported

LONG = " ".join(f"word{i}" for i in range(30))


def _responder(marker: str) -> Any:
    """Answers with the marker wherever an answer can hold it: text, tool arguments, and an
    echo of the tool's result."""

    def respond(turn: ChatTurn) -> Reply:
        if turn.tools and turn.last.role == "user":
            name = turn.tools[0].name
            return Reply(tool_calls=[ToolCallReply(name=name, arguments={"query": marker})])
        if turn.last.role == "tool":
            return Reply(text=f"the tool said {turn.last.text}")
        return Reply(text=f"{marker} {turn.last_user_text} {LONG}")

    return respond


def _eval_responder(marker: str) -> Any:
    def respond(turn: ChatTurn) -> Reply:
        calls = [ToolCallReply(name=t.name, arguments={"path": marker}) for t in turn.tools[:1]]
        return Reply(text=json.dumps({"answer": marker, "plan": [marker]}), tool_calls=calls)

    return respond


@pytest.fixture
def marker() -> str:
    return f"CANARY-{uuid.uuid4().hex}"


@pytest.fixture
async def auth(
    http: httpx.AsyncClient,
    token_for: TokenFactory,
    tenant: str,
    temporal_client: Client,
    upstream: UpstreamServer,
    marker: str,
) -> dict[str, str]:
    for model in ("canary-gpt", "canary-claude", "canary-broken", "canary-policy"):
        upstream.register(model, _responder(marker))
    upstream.register("canary-eval", _eval_responder(marker))
    upstream.inject("canary-broken", Fault(kind=FaultKind.SERVER_ERROR))
    upstream.inject("canary-policy", Fault(kind=FaultKind.CONTENT_POLICY))
    ref = upstream.endpoint_ref
    auth = {"Authorization": f"Bearer {await token_for(tenant)}"}
    for profile, deployment, fields, extra in (
        ("canary", "cn/gpt", {"model": "canary-gpt"}, {}),
        ("canary-claude", "cn/claude", {"provider": "anthropic", "model": "canary-claude"}, {}),
        ("canary-broken", "cn/broken", {"model": "canary-broken"}, {}),
        ("canary-policy", "cn/policy", {"model": "canary-policy"}, {}),
        (
            "canary-embed",
            "cn/embed",
            {"model": "canary-embed"},
            {"modality": "Embedding", "embeddingCompatibility": "sim-32"},
        ),
    ):
        await approved_profile(
            http,
            auth,
            temporal_client,
            tenant,
            profile,
            {deployment: {"endpointRef": ref, **fields}},
            **extra,
        )
    await register(http, auth, "cn/eval", model="canary-eval", endpointRef=ref)
    return auth


async def _invoke(
    http: httpx.AsyncClient, auth: dict[str, str], path: str, body: dict[str, Any]
) -> httpx.Response:
    return await http.post(path, json=body, headers={**auth, "Idempotency-Key": uuid.uuid4().hex})


def _chat(profile: str, marker: str, stream: bool = False, **over: Any) -> dict[str, Any]:
    return {
        "model": profile,
        "stream": stream,
        "messages": [
            {"role": "system", "content": f"you guard {marker}"},
            {"role": "user", "content": f"repeat {marker}"},
        ],
        **over,
    }


def _tools(marker: str) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "description": f"looks up {marker}",
                "parameters": {
                    "type": "object",
                    "properties": {"query": {"type": "string", "description": marker}},
                    "required": ["query"],
                },
            },
        }
    ]


def _text(resp: httpx.Response) -> str:
    """What the caller read: the body, or the streamed deltas joined (chat chunks, Messages
    text deltas, Responses output-text deltas)."""
    if not resp.headers.get("content-type", "").startswith("text/event-stream"):
        return resp.text
    parts = []
    for line in resp.text.splitlines():
        if line.startswith("data: {"):
            event = json.loads(line[6:])
            for choice in event.get("choices", []):
                parts.append(choice.get("delta", {}).get("content") or "")
            delta = event.get("delta")
            if isinstance(delta, str):
                parts.append(delta)
            elif isinstance(delta, dict):
                parts.append(delta.get("text") or delta.get("partial_json") or "")
    return "".join(parts)


def _message(profile: str, marker: str, stream: bool = False, **over: Any) -> dict[str, Any]:
    return {
        "model": profile,
        "max_tokens": 200,
        "stream": stream,
        "system": [{"type": "text", "text": f"you guard {marker}"}],
        "messages": [{"role": "user", "content": f"repeat {marker}"}],
        **over,
    }


def _response(profile: str, marker: str, stream: bool = False, **over: Any) -> dict[str, Any]:
    return {
        "model": profile,
        "stream": stream,
        "instructions": f"you guard {marker}",
        "input": [{"role": "user", "content": f"repeat {marker}"}],
        **over,
    }


async def _plant_agent_surfaces(http: httpx.AsyncClient, auth: dict[str, str], marker: str) -> int:
    """Messages and Responses, plain and streamed, each with a tool round trip whose
    definition, arguments and result hold the marker; returns how many calls were made."""
    calls = 0
    tool = _tools(marker)[0]["function"]
    anthropic_tool = {**{k: tool[k] for k in ("name", "description")}}
    anthropic_tool["input_schema"] = tool["parameters"]
    function_tool = {"type": "function", **tool}
    for profile in ("canary", "canary-claude"):
        for stream in (False, True):
            said = await _invoke(http, auth, "/v1/messages", _message(profile, marker, stream))
            assert said.status_code == 200 and marker in _text(said), said.text
            told = await _invoke(http, auth, "/v1/responses", _response(profile, marker, stream))
            assert told.status_code == 200 and marker in _text(told), told.text
            calls += 2
        asked = await _invoke(
            http, auth, "/v1/messages", _message(profile, marker, tools=[anthropic_tool])
        )
        [use] = [b for b in asked.json()["content"] if b["type"] == "tool_use"]
        assert marker in json.dumps(use["input"])
        follow = _message(profile, marker, stream=True, tools=[anthropic_tool])
        follow["messages"] += [
            {"role": "assistant", "content": [use]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": use["id"], "content": f"found {marker}"}
                ],
            },
        ]
        answered = await _invoke(http, auth, "/v1/messages", follow)
        assert answered.status_code == 200 and f"found {marker}" in _text(answered)
        asked = await _invoke(
            http, auth, "/v1/responses", _response(profile, marker, tools=[function_tool])
        )
        [call] = [i for i in asked.json()["output"] if i["type"] == "function_call"]
        assert marker in call["arguments"]
        follow = _response(profile, marker, stream=True, tools=[function_tool])
        follow["input"] += [
            call,
            {
                "type": "function_call_output",
                "call_id": call["call_id"],
                "output": f"found {marker}",
            },
        ]
        answered = await _invoke(http, auth, "/v1/responses", follow)
        assert answered.status_code == 200 and f"found {marker}" in _text(answered)
        calls += 4
    # Token counting sends the prompt to the deployment too (no invocation, no receipt).
    count = _message("canary-claude", marker, tools=[anthropic_tool])
    counted = await _invoke(http, auth, "/v1/messages/count_tokens", count)
    assert counted.headers["x-model-router-token-count"] == "deployment", counted.text
    return calls


async def _plant(http: httpx.AsyncClient, auth: dict[str, str], marker: str) -> int:
    """Every kind of invocation, each carrying the marker; returns how many were made."""
    calls = 0
    for profile in ("canary", "canary-claude"):
        for stream in (False, True):
            resp = await _invoke(http, auth, "/v1/chat/completions", _chat(profile, marker, stream))
            assert resp.status_code == 200 and marker in _text(resp), resp.text
            calls += 1
        # A tool call whose arguments hold the marker, then the tool's result holding it.
        asked = await _invoke(
            http, auth, "/v1/chat/completions", _chat(profile, marker, tools=_tools(marker))
        )
        assert asked.status_code == 200, asked.text
        call = asked.json()["choices"][0]["message"]["tool_calls"][0]
        assert marker in call["function"]["arguments"]
        follow = _chat(profile, marker, stream=True, tools=_tools(marker))
        follow["messages"] += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": f"found {marker}"},
        ]
        answered = await _invoke(http, auth, "/v1/chat/completions", follow)
        assert answered.status_code == 200 and f"found {marker}" in _text(answered)
        calls += 2
    embedded = await _invoke(
        http, auth, "/v1/embeddings", {"model": "canary-embed", "input": [marker, f"x {marker}"]}
    )
    assert embedded.status_code == 200 and len(embedded.json()["data"]) == 2
    # Failed: a provider that keeps failing, and one that refuses on content policy.
    broken = await _invoke(http, auth, "/v1/chat/completions", _chat("canary-broken", marker))
    assert broken.status_code >= 500
    refused = await _invoke(http, auth, "/v1/chat/completions", _chat("canary-policy", marker))
    assert refused.status_code == 400
    calls += 3
    return calls + await _plant_agent_surfaces(http, auth, marker)


async def _partial(
    http: httpx.AsyncClient, auth: dict[str, str], upstream: UpstreamServer, marker: str
) -> None:
    """A stream cut after the marker reached the caller: an error event, a Partial receipt;
    and a held one cut after the marker, rescued by its retry."""
    # A held stream (issue 20) cut after the marker: the attempt's events waited in memory, the
    # retry answered whole, and the held output went nowhere but the caller and the artifact.
    # First, while the breaker is closed (the Partial cuts below count against it).
    upstream.inject("canary-gpt", Fault(kind=FaultKind.STREAM_CUT, after_chunks=3, times=1))
    resp = await http.post(
        "/v1/chat/completions",
        json=_chat("canary", marker, True),
        headers={**auth, "Idempotency-Key": uuid.uuid4().hex, "X-Model-Router-Buffered": "true"},
    )
    assert resp.status_code == 200 and marker in _text(resp) and "[DONE]" in resp.text
    assert '"buffered":true' in resp.text.replace(" ", "")
    upstream.inject("canary-gpt", Fault(kind=FaultKind.STREAM_CUT, after_chunks=3, times=1))
    resp = await _invoke(http, auth, "/v1/chat/completions", _chat("canary", marker, True))
    assert resp.status_code == 200 and marker in _text(resp)
    assert "[DONE]" not in resp.text and '"error"' in resp.text
    # The same cut on the agent-native surfaces: an error event, a failed response.
    for path, body, end in (
        ("/v1/messages", _message("canary", marker, True), "event: error"),
        ("/v1/responses", _response("canary", marker, True), "event: response.failed"),
    ):
        upstream.inject("canary-gpt", Fault(kind=FaultKind.STREAM_CUT, after_chunks=3, times=1))
        resp = await _invoke(http, auth, path, body)
        assert resp.status_code == 200 and marker in _text(resp), resp.text
        assert end in resp.text


async def _evaluate(http: httpx.AsyncClient, auth: dict[str, str]) -> None:
    started = await http.post(
        "/factory/model-deployments/cn/eval/evaluate",
        headers={**auth, "Idempotency-Key": uuid.uuid4().hex},
    )
    assert started.status_code == 202, started.text

    async def finished() -> bool:
        body = (await http.get("/factory/model-deployments/cn/eval", headers=auth)).json()
        return (body.get("evaluation") or {}).get("status") in ("Completed", "Failed")

    await eventually(finished, timeout=180, interval=0.5)


async def _console_pages(api_url: str, sessions: Any, tenant: str) -> dict[str, str]:
    """Every console page of the tenant, as an operator would open them: path → HTML."""
    client_id, secret = f"canary-console-{uuid.uuid4().hex[:6]}", new_client_secret()
    await upsert_client(
        sessions,
        tenant_id=tenant,
        client_id=client_id,
        secret=secret,
        roles=[Role.PLATFORM_ADMIN],
        scopes=list(Scope),
    )
    console, signed = await ConsoleSession.sign_in(api_url, client_id, secret)
    assert signed.status_code == 303
    pages: dict[str, str] = {}
    try:

        async def read(path: str, **params: Any) -> str:
            resp = await console.get(path, **params)
            assert resp.status_code == 200, (path, resp.status_code)
            pages[f"{path}?{params}" if params else path] = resp.text
            return resp.text

        await read("/console")
        for dep in ("cn/gpt", "cn/claude", "cn/broken", "cn/policy", "cn/embed", "cn/eval"):
            await read("/console/deployment", id=dep)
            await read("/console/deployment/evaluation", id=dep)
            await read("/console/deployment/confirm", id=dep, action="license")
        listing = await read("/console/receipts")
        for status in ("Reported", "Estimated", "Unknown"):
            await read("/console/receipts", usage_status=status)
        ids = sorted(set(re.findall(r'data-receipt="([0-9a-f-]{36})"', listing)))
        assert ids, "the receipts page lists none of the test's receipts"
        for receipt in ids:
            await read(f"/console/receipts/{receipt}")
        await read("/console/profiles")
        for profile in ("canary", "canary-claude", "canary-embed"):
            await read(f"/console/profiles/{profile}")
        for window in ("24h", "7d"):
            await read("/console/overview", window=window)
        await read("/console/preview")
        preview = await console.post(
            "/console/preview",
            {"csrf_token": console.csrf, "profile_id": "canary", "needs_tools": "true"},
        )
        assert preview.status_code == 200
        pages["POST /console/preview"] = preview.text
    finally:
        await console.close()
    return pages


async def _histories(client: Client, since: datetime, calls: int) -> list[tuple[str, str, bytes]]:
    """The histories of the workflows started since `since`, once visibility (eventually
    consistent) lists every one this test started: an InvokeModel per call and per surface
    call, and the evaluation."""
    query = f"StartTime >= '{since.isoformat().replace('+00:00', 'Z')}'"

    async def listed() -> list[WorkflowExecution] | None:
        runs = [wf async for wf in client.list_workflows(query)]
        kinds = [wf.workflow_type for wf in runs]
        enough = kinds.count("InvokeModel") >= calls + 3 and "EvaluateDeployment" in kinds
        return runs if enough else None

    found = []
    for wf in await eventually(listed):
        history = await client.get_workflow_handle(wf.id, run_id=wf.run_id).fetch_history()
        raw = History(events=history.events).SerializeToString()
        found.append((wf.workflow_type, json.dumps(history.to_json_dict()), raw))
    return found


async def test_the_marker_reaches_no_store_log_span_metric_or_history(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    tenant: str,
    marker: str,
    settings: Settings,
    temporal_client: Client,
    upstream: UpstreamServer,
    spans: SpanCapture,
    caplog: pytest.LogCaptureFixture,
    api_url: str,
    sessions: Any,
) -> None:
    caplog.set_level(logging.DEBUG)
    since = datetime.now(UTC) - timedelta(seconds=1)
    calls = await _plant(http, auth, marker)
    await _partial(http, auth, upstream, marker)
    await _evaluate(http, auth)

    pages = await _console_pages(api_url, sessions, tenant)
    # The pages hold this test's catalog and receipts: the search looks where content would be.
    assert "cn/gpt" in pages["/console"] and "Partial" in pages["/console/receipts"]
    assert any("requestHash" in html for html in pages.values())
    for path, html in pages.items():
        assert marker not in html, path

    dump = pg_dump(settings.database_url)
    # The dump holds this test's receipts and evidence: the search looks where content would be.
    assert tenant in dump and "cn/eval" in dump and "Partial" in dump
    assert marker not in dump

    assert "POST /v1/chat/completions" in caplog.text
    assert "GET /console/receipts" in caplog.text and "POST /console/preview" in caplog.text
    assert marker not in caplog.text
    for record in caplog.records:
        assert marker not in json.dumps(record.__dict__, default=str)

    shipped = exported(spans.spans)
    assert "chat canary-gpt" in shipped and "embeddings canary-embed" in shipped
    assert marker not in shipped

    scraped = (await http.get("/metrics")).text
    assert tenant in scraped
    assert marker not in scraped
    assert marker not in repr(metrics.snapshot())
    # The agent-native surfaces were searched too (their requests are in the logs above).
    assert "POST /v1/messages" in caplog.text and "POST /v1/responses" in caplog.text

    histories = await _histories(temporal_client, since, calls)
    for kind, text, raw in histories:
        assert marker not in text, kind
        assert marker.encode() not in raw, kind
