"""The fault benchmark's caller: one chat call through the gateway, streamed or not, and what
became of it from the caller's side — answered, refused cleanly (a 429/503 with Retry-After, or
an error event in a stream), dropped (the connection ended without either), never reached (the
API was not listening), or any other status. No content is kept: only the outcome and the
error's type."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import httpx

from bench.invoke_config import PROFILE, PROMPT

OK, REFUSED, ERROR_EVENT, DROPPED, UNREACHABLE, SPENT, LOST = (
    "ok",
    "refused",
    "error event",
    "dropped",
    "unreachable",
    "spent key",
    "answer lost",
)
# The failure a replay names when its call completed but its stored answer cannot be read: here,
# the API was killed between the receipt's close and the answer's file (api/wire.py).
OUTPUT_UNAVAILABLE = "output_unavailable"


@dataclass
class Call:
    key: str
    i: int
    stream: bool
    at: float  # seconds since the load began, when the call was sent
    took: float  # seconds until its outcome was known
    outcome: str
    detail: str = ""  # the error's type or the problem's, never the content
    retry_after: float | None = None


def status_outcome(status: int, headers: httpx.Headers) -> str:
    """A status that is not 200: a refusal the caller can act on (429 or 503 with
    Retry-After); a key already spent (409: a retry of a call the gateway closed without an
    answer replays that close, since the provider may have billed it); or anything else by its
    code (a 500 is a defect)."""
    if status in (429, 503) and "retry-after" in headers:
        return REFUSED
    if status == 409:
        return SPENT
    return f"HTTP {status}"


def error_type(body: bytes) -> str:
    """The error's type from a problem+json or an OpenAI-style error envelope."""
    try:
        obj: Any = json.loads(body)
    except ValueError:
        return "not JSON"
    if not isinstance(obj, dict):
        return "not an object"
    error = obj.get("error")
    if isinstance(error, dict) and error.get("type"):
        return str(error["type"])
    return str(obj.get("reason") or obj.get("type") or "")


async def call(
    client: httpx.AsyncClient, url: str, token: str, key: str, i: int, stream: bool, t0: float
) -> Call:
    content = PROMPT.format(i=f"fault-{i}")
    body: dict[str, Any] = {"model": PROFILE, "messages": [{"role": "user", "content": content}]}
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": key}
    expected = "Echo: " + content
    sent = time.perf_counter()

    def done(outcome: str, detail: str = "", retry_after: float | None = None) -> Call:
        took = time.perf_counter() - sent
        return Call(key, i, stream, sent - t0, took, outcome, detail, retry_after)

    try:
        async with client.stream("POST", url, json=body, headers=headers) as resp:
            if resp.status_code != 200:
                kind = error_type(await resp.aread())
                wait = resp.headers.get("retry-after")
                outcome = status_outcome(resp.status_code, resp.headers)
                if kind == OUTPUT_UNAVAILABLE:
                    outcome = LOST
                return done(outcome, kind, float(wait) if wait and wait.isdigit() else None)
            if not stream:
                answer = json.loads(await resp.aread())
                text = answer["choices"][0]["message"]["content"]
                return done(OK) if text == expected else done("wrong answer")
            parts: list[str] = []
            async for line in resp.aiter_lines():
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    return done(OK) if "".join(parts) == expected else done("wrong answer")
                event = json.loads(line[6:])
                if "error" in event:
                    kind = str(event["error"].get("type", ""))
                    return done(LOST if kind == OUTPUT_UNAVAILABLE else ERROR_EVENT, kind)
                for choice in event.get("choices") or []:
                    parts.append((choice.get("delta") or {}).get("content") or "")
            return done(DROPPED, "stream ended without [DONE] or an error event")
    except httpx.ConnectError as exc:
        return done(UNREACHABLE, type(exc).__name__)
    except httpx.TransportError as exc:  # reset, cut mid-answer, or a timeout: a hang
        return done(DROPPED, type(exc).__name__)
