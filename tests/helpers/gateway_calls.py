"""A chat call through `/gateway/invoke` as the receipt tests make it, JSON or streamed: the
answer's text and the receipt the caller got with it; and that receipt as the store holds it,
listed under its run."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx


async def invoke(
    http: httpx.AsyncClient,
    auth: dict[str, str],
    profile: str,
    *,
    stream: bool,
    key: str | None = None,
) -> tuple[str, dict[str, Any]]:
    """The answer's text and the receipt: in the answer's body, or the stream's last event."""
    body: dict[str, Any] = {
        "profileId": profile,
        "runId": str(uuid.uuid4()),
        "request": {"messages": [{"role": "user", "content": "count me"}], "max_tokens": 50},
        "stream": stream,
    }
    if key is not None:
        body["idempotencyKey"] = key
    if not stream:
        resp = await http.post("/gateway/invoke", headers=auth, json=body, timeout=60)
        assert resp.status_code == 200, resp.text
        return resp.json()["output"]["text"], dict(resp.json()["receipt"])
    async with http.stream("POST", "/gateway/invoke", headers=auth, json=body, timeout=60) as sse:
        assert sse.status_code == 200
        lines = [line async for line in sse.aiter_lines()]
    events = [line.removeprefix("event: ") for line in lines if line.startswith("event: ")]
    data = [json.loads(line.removeprefix("data: ")) for line in lines if line.startswith("data: ")]
    assert events[-1] == "receipt", events
    text = "".join(d["text"] for e, d in zip(events, data, strict=True) if e == "text_delta")
    return text, dict(data[-1])


async def stored(
    http: httpx.AsyncClient, auth: dict[str, str], receipt: dict[str, Any]
) -> dict[str, Any]:
    """The receipt as the store holds it, closed."""
    resp = await http.get(f"/factory/runs/{receipt['runId']}/model-receipts", headers=auth)
    assert resp.status_code == 200, resp.text
    [found] = resp.json()
    assert found["invocationId"] == receipt["invocationId"] and found["endedAt"] is not None
    return dict(found)
